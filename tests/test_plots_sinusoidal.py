"""Chapter 3 figures: what they draw is the package's table and measurements, with the axes labelled the right way."""

import math
import re

import matplotlib.pyplot as plt
import numpy as np
import pytest

from course_embed import analysis, plots, sinusoidal_table


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_heatmap_shows_the_table_with_fast_dimensions_on_the_left():
    fig = plots.plot_heatmap(length=30, d_model=64, dims=16, base=100.0)
    ax = fig.axes[0]
    np.testing.assert_array_equal(ax.images[0].get_array(), sinusoidal_table(30, 64, 100.0)[:, :16].numpy())
    assert ax.get_xlabel() == "dimension index (0 = fastest)" and ax.get_ylabel() == "position"
    top = ax.child_axes[0]  # the wavelength axis
    ticks = [int(t) for t in top.get_xticks()]
    assert ticks[0] == 0 and ticks[-1] == 14
    labels = [float(t.get_text().replace(",", "")) for t in top.get_xticklabels()]
    expected = [2 * math.pi * 100.0 ** (2 * (j // 2) / 64) for j in ticks]
    assert all(math.isclose(a, b, rel_tol=5e-3) for a, b in zip(labels, expected))
    assert labels == sorted(labels)  # wavelengths grow to the right


def test_explorer_figure_draws_the_table_and_its_columns():
    fig = plots.plot_explorer(d_model=32, base=1000.0, positions=50)
    table = sinusoidal_table(50, 32, 1000.0).numpy()
    heat, curves = fig.axes[0], fig.axes[2]  # axes[1] is the colorbar
    np.testing.assert_array_equal(heat.images[0].get_array(), table)
    assert plots.explorer_dims(32) == [0, 4, 8, 16]
    for line, j in zip(curves.lines, plots.explorer_dims(32)):
        np.testing.assert_array_equal(line.get_ydata(), table[:, j])
        assert line.get_label().startswith(f"dim {j} ")


def test_dot_by_offset_figure_plots_the_closed_form_and_marks_the_first_rise():
    fig = plots.plot_dot_by_offset(max_offset=200, d_models=(64,))
    ax = fig.axes[0]
    curve, marker = ax.lines
    dots = analysis.dot_by_offset(200, 64) / 32
    np.testing.assert_allclose(curve.get_ydata(), dots[1:].numpy(), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(curve.get_xdata(), np.arange(1, 201))
    rise = analysis.first_rise(64)
    assert list(marker.get_xdata()) == [rise] and ax.get_xscale() == "log"


def test_unseen_angles_figure():
    fig = plots.plot_unseen_angles(train_len=64, test_len=256, d_model=32)
    ax = fig.axes[0]
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), analysis.unseen_angle_gap(64, 256, 32).numpy())
    turned = int((analysis.wavelengths(32)[::2] <= 64).sum())
    assert ax.lines[1].get_xdata()[0] == turned - 0.5


def test_pair_circles_update_points_at_the_table_row():
    fig, update = plots.pair_circles(d_model=16, pairs=(0, 3), base=10000.0)
    row = sinusoidal_table(1, 16, offset=23)[0]
    hands = update(23)
    for hand, i in zip(hands, (0, 3)):
        x, y = hand.get_data()
        assert list(x) == [0, row[2 * i].item()] and list(y) == [0, row[2 * i + 1].item()]
        assert math.isclose(math.hypot(x[1], y[1]), 1.0, rel_tol=1e-6)
    assert fig.texts[0].get_text() == "position 23"


def test_animation_has_one_frame_per_position_a_stable_id_and_closes_its_figure():
    before = plt.get_fignums()
    html = plots.animate_pairs(d_model=16, pairs=(0, 1), positions=5, name="demo_anim")
    assert plt.get_fignums() == before
    frames = re.findall(r'frames\[(\d+)\] = "data:image/png;base64,', html)
    assert frames == ["0", "1", "2", "3", "4"]
    assert "new Array(5)" in html and "anim_imgdemo_anim" in html and "animdemo_anim" in html
    assert not re.search(r"[0-9a-f]{32}", html)  # to_jshtml's random uuid is gone
    assert plots.animate_pairs(d_model=16, pairs=(0, 1), positions=5, name="demo_anim") == html


@pytest.mark.parametrize("call, match", [
    (lambda: plots.plot_heatmap(d_model=8, dims=16), r"dims must lie in \[2, d_model=8\]"),
    (lambda: plots.plot_explorer(positions=1), "positions must be >= 2"),
    (lambda: plots.pair_circles(d_model=8, pairs=(4,)), r"pairs must be indices in \[0, d_model/2 = 4\)"),
    (lambda: plots.animate_pairs(name="my-anim"), "JavaScript identifier"),
    (lambda: plots.animate_pairs(positions=0), "positions must be >= 1"),
])
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()
    plt.close("all")

