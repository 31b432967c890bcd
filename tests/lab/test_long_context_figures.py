"""Chapter 5's figures (course_embed.lab.long_context_figures) draw the arrays they are given."""

import numpy as np
import pytest
from matplotlib.figure import Figure

from course_embed.lab import long_context_figures as lf


def test_bands_draw_the_seed_mean_and_the_min_max_band():
    rows = {"a": np.array([[1.0, 2.0], [3.0, 6.0]]), "b": np.array([[0.0, 1.0]])}
    fig, axes = lf.band_panels(
        [64, 128],
        {"left": rows, "right": {"a": rows["a"]}},
        xlabel="x",
        ylabel="y",
        train_len=64,
        vline=128,
        styles={"b": {"ls": "--"}},
    )
    left, right = axes
    assert isinstance(fig, Figure) and left.get_title() == "left"
    assert left.lines[0].get_ydata().tolist() == pytest.approx([2.0, 4.0])
    assert left.lines[1].get_linestyle() == "--"
    band = left.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(1.0) and band.max() == pytest.approx(6.0)
    assert [t.get_text() for t in right.get_xticklabels()] == ["1x", "2x"]
    # one legend, beside the last panel, naming every line of the first
    assert right.get_legend() is not None and left.get_legend() is None
    assert [t.get_text() for t in right.get_legend().get_texts()] == ["a", "b"]


def test_a_shorter_row_is_drawn_over_the_first_points():
    fig, (ax,) = lf.band_panels([8, 24, 40], {"": {"short": np.ones((2, 2))}}, xlabel="x", ylabel="y")
    assert ax.lines[0].get_xdata().tolist() == [8, 24]


def test_frequency_ratios_mark_where_pairs_cross_32_turns_and_1_turn():
    turns = np.array([100.0, 40.0, 10.0, 2.0, 0.5, 0.1])
    fig = lf.frequency_ratios({"kept": np.ones(6)}, turns, "t", styles={"kept": {"ls": ":"}})
    ax = fig.axes[0]
    assert [line.get_xdata()[0] for line in ax.lines[1:]] == [1.5, 3.5]  # 2 pairs above 32 turns, 4 above 1
    assert ax.lines[0].get_linestyle() == ":"


def test_alibi_draws_every_head_and_masks_future_keys():
    slopes = np.array([0.5, 0.25])
    i = np.arange(4)
    bias = -slopes[:, None, None] * np.abs(i[:, None] - i[None, :])
    fig = lf.alibi(slopes, bias)
    lines, image = fig.axes[0].lines, fig.axes[1].images[0].get_array()
    assert len(lines) == 2 and lines[0].get_ydata().tolist() == pytest.approx([-1.5, -1.0, -0.5, 0.0])
    assert image.mask[0, 1] and not image.mask[1, 0]
    assert fig.axes[0].get_legend().get_bbox_to_anchor().y1 < fig.axes[0].get_window_extent().y0  # below


def test_rope_bounds_draw_each_curve_over_the_trivial_bound():
    curves = {"a": np.array([4.0, 2.0, 1.5]), "b": np.array([1.0, 0.5, 0.1])}
    ax = lf.rope_bounds(curves, head_dim=8).axes[0]
    assert [line.get_ydata().tolist() for line in ax.lines[:2]] == [[4.0, 2.0, 1.5], [1.0, 0.5, 0.1]]
    assert ax.lines[2].get_linestyle() == "--" and ax.get_yscale() == "log"


def test_frequency_ratios_label_the_divisors_and_keep_the_legend_off_the_lines():
    ratios = {"kept": np.ones(4), "divided": np.full(4, 1 / 8)}
    ax = lf.frequency_ratios(ratios, np.array([40.0, 4.0, 0.5, 0.1]), "t").axes[0]
    assert ax.get_yticks().tolist() == [1.0, 0.5, 0.25, 0.125]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1", "1/2", "1/4", "1/8"]
    assert ax.get_legend().get_bbox_to_anchor().x0 > ax.get_window_extent().x1 - 1  # beside the axes


def test_the_rope_animation_draws_what_it_is_given_and_describes_itself():
    calls = []

    def rotated(m):
        calls.append(m)
        return np.array([1.0, 0.0, 0.0, 1.0]), np.array([0.0, 1.0, 1.0, 0.0]), 0.25

    page = lf.rope_pairs_animation(rotated, rates=[1.0, 0.1], gap=3, frames=3)
    assert set(calls) == {0, 1, 2}
    assert 'id="_anim_imgch5_rope_pairs"' in page and 'alt="Animation: a query arrow' in page
    assert "score +0.250" not in page  # drawn into the frames, not written as text
