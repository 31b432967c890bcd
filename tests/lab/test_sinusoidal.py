"""Chapter 3 measurements, checked against float64 closed forms (Python's math) and brute force on small cases."""

import base64
import io
import math
import re
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from fontTools.ttLib import TTFont
from PIL import Image

from course_embed import sinusoidal_table
from course_embed.lab import pair_animation, sinusoidal


def closed_form(length, d, base=10000.0, offset=0):
    """Vaswani et al. section 3.5, element by element in Python floats (float64)."""
    return torch.tensor(
        [
            [
                math.sin(p / base ** (2 * (j // 2) / d)) if j % 2 == 0 else math.cos(p / base ** (2 * (j // 2) / d))
                for j in range(d)
            ]
            for p in range(offset, offset + length)
        ],
        dtype=torch.float64,
    )


def dot_closed_form(k, d, base=10000.0):
    return sum(math.cos(k / base ** (2 * i / d)) for i in range(d // 2))


@pytest.mark.parametrize("d, base", [(8, 10000.0), (512, 10000.0), (6, 100.0)])
def test_wavelengths_closed_form(d, base):
    expected = torch.tensor([2 * math.pi * base ** (2 * (j // 2) / d) for j in range(d)], dtype=torch.float64)
    lengths = sinusoidal.wavelengths(d, base)
    torch.testing.assert_close(lengths, expected, rtol=1e-12, atol=0)
    assert math.isclose(lengths[0].item(), 2 * math.pi) and lengths[-1] < base * 2 * math.pi
    assert bool((lengths[2::2] > lengths[:-2:2]).all())  # slower with every pair: low index = fast


def test_adjacent_change_is_a_mean_absolute_difference(gen):
    table = torch.randn(7, 5, generator=gen)
    expected = [sum(abs(table[p + 1, j].item() - table[p, j].item()) for p in range(6)) / 6 for j in range(5)]
    torch.testing.assert_close(
        sinusoidal.adjacent_change(table), torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-12
    )


def test_left_of_the_heatmap_changes_fastest():
    # the view popular articles plot (100 positions, first 128 of 512 dimensions): the left half changes faster
    change = sinusoidal.adjacent_change(sinusoidal_table(100, 512)[:, :128])
    assert change[:64].mean() > 3 * change[64:].mean()
    assert change[:2].max() == change.max()  # the first pair (dims 0 and 1) changes most


@pytest.mark.parametrize("d, k", [(8, 1), (64, 37), (512, 100)])
def test_rotation_error_float64_is_rounding_only(d, k, device):
    assert sinusoidal.rotation_error(k, d, length=300, device=device) < 1e-12


def test_rotation_error_float32_matches_an_independent_computation():
    d, k, length = 16, 5, 50
    table = closed_form(length + k, d).float()  # (s + k, d)
    rotation = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        a = k / 10000 ** (2 * i / d)
        rotation[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor(
            [[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]]
        )
    expected = (table[:length] @ rotation.float().T - table[k:]).abs().max().item()
    measured = sinusoidal.rotation_error(k, d, length=length, dtype=torch.float32)
    assert 0 < measured < 4 * torch.finfo(torch.float32).eps
    assert abs(measured - expected) < 1e-7


def test_rotation_error_does_not_grow_with_position():
    near = sinusoidal.rotation_error(10, 64, length=100, dtype=torch.float32)
    far = sinusoidal.rotation_error(10, 64, length=100, offset=1_000_000, dtype=torch.float32)
    assert far < 4 * torch.finfo(torch.float32).eps and near < 4 * torch.finfo(torch.float32).eps


@pytest.mark.parametrize("k", [-1, 2.5])
def test_rotation_error_rejects_bad_offsets(k):
    with pytest.raises(ValueError, match="k must be an int >= 0"):
        sinusoidal.rotation_error(k, 8)


@pytest.mark.parametrize("d", [16, 64, 512])
def test_dot_by_offset_matches_table_dot_products(d, gen):
    dots = sinusoidal.dot_by_offset(300, d)
    assert dots[0].item() == d / 2
    table = sinusoidal_table(1500, d, dtype=torch.float64)
    for _ in range(10):
        p, k = torch.randint(0, 1200, (1,), generator=gen).item(), torch.randint(0, 301, (1,), generator=gen).item()
        assert abs((table[p] @ table[p + k]).item() - dots[k].item()) < 1e-9
        assert abs(dot_closed_form(k, d) - dots[k].item()) < 1e-9


@pytest.mark.parametrize("d, base", [(16, 10000.0), (64, 10000.0), (512, 10000.0), (64, 100.0)])
def test_first_rise_matches_brute_force(d, base):
    k = 1
    while dot_closed_form(k, d, base) <= dot_closed_form(k - 1, d, base):
        k += 1
    assert sinusoidal.first_rise(d, base) == k
    assert sinusoidal.first_rise(d, base, max_offset=k - 1) is None


def test_closest_distinct_rows_matches_brute_force(gen):
    table = torch.randn(30, 6, generator=gen)
    table[17] = table[4] + 1e-3  # a planted near-duplicate
    best = min((math.dist(table[p].tolist(), table[q].tolist()), p, q) for p in range(30) for q in range(p + 1, 30))
    found = sinusoidal.closest_distinct_rows(table)
    assert (found.first, found.second) == best[1:] == (4, 17)
    assert math.isclose(found.distance, best[0], rel_tol=1e-9)


def test_closest_distinct_rows_sees_exact_duplicates_and_skips_nan():
    table = torch.tensor([[0.0, 1.0], [float("nan"), 0.0], [float("nan"), 0.0], [5.0, 5.0], [0.0, 1.0]])
    found = sinusoidal.closest_distinct_rows(table)
    assert (found.distance, found.first, found.second) == (0.0, 0, 4)


def test_closest_rows_of_a_sinusoidal_table_are_at_the_closed_form_distance():
    d, length = 64, 300
    expected = min(math.sqrt(d - 2 * dot_closed_form(k, d)) for k in range(1, length))
    found = sinusoidal.closest_distinct_rows(sinusoidal_table(length, d, dtype=torch.float64))
    assert math.isclose(found.distance, expected, rel_tol=1e-9)
    assert math.isclose(found.distance, math.sqrt(d - 2 * dot_closed_form(found.second - found.first, d)), rel_tol=1e-9)


def test_table_error_against_python_closed_form():
    table = closed_form(4, 8, offset=1000).float()
    expected = (table.double() - closed_form(4, 8, offset=1000)).abs().max().item()
    assert math.isclose(sinusoidal.table_error(table, offset=1000), expected, rel_tol=1e-6)
    assert sinusoidal.table_error(closed_form(4, 8, offset=1000), offset=1000) < 1e-12
    assert math.isnan(sinusoidal.table_error(torch.full((2, 4), float("nan"))))


@pytest.mark.parametrize("offset", [10_000, 100_000, 1_000_000])
def test_float32_angles_lose_accuracy_with_position_but_a_cast_table_does_not(offset):
    eps32 = torch.finfo(torch.float32).eps
    cast = sinusoidal.table_error(sinusoidal_table(8, 64, offset=offset), offset)
    naive = sinusoidal.table_error(sinusoidal.naive_table(8, 64, torch.float32, offset=offset), offset)
    assert cast <= eps32 / 2 * 1.01  # only the final rounding to float32
    assert naive > offset * eps32 / 100  # the angle p * w is rounded at the scale of p


def test_naive_table_in_float64_is_correct(device):
    table = sinusoidal.naive_table(40, 16, torch.float64, offset=3, base=100.0, device=device)
    torch.testing.assert_close(table.cpu(), closed_form(40, 16, base=100.0, offset=3), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_angles_repeat_rows_where_integers_stop_being_exact(dtype, device):
    # integers are exact up to 2 / eps (256 in bfloat16, 2048 in float16); the next one rounds down to it
    last_exact = round(2 / torch.finfo(dtype).eps)
    table = sinusoidal.naive_table(last_exact + 10, 32, dtype, device=device)
    assert sinusoidal.first_repeated_row(table) == (last_exact + 1, last_exact)
    assert sinusoidal.closest_distinct_rows(table).distance == 0.0
    cast = sinusoidal_table(4 * last_exact, 32, dtype=dtype, device=device)
    assert sinusoidal.first_repeated_row(cast) is None


def test_float16_positions_overflow_to_inf_and_sin_gives_nan():
    # float16's largest value is 65504 with a spacing of 32 there; from 65504 + 16 on, rounding gives inf
    fp16 = torch.finfo(torch.float16)
    overflow = round(fp16.max + 2**15 * fp16.eps / 2)
    table = sinusoidal.naive_table(100, 8, torch.float16, offset=overflow - 50)
    assert sinusoidal.first_nonfinite_row(table) == 50
    assert bool(table[50:].isnan().all()) and bool(table[:50].isfinite().all())


def test_first_repeated_row_matches_brute_force(gen):
    table = torch.randint(0, 3, (60, 2), generator=gen).float()
    table[5] = float("nan")
    expected = next(
        ((q, p) for q in range(60) for p in range(q) if table[q].isfinite().all() and torch.equal(table[p], table[q])),
        None,
    )
    assert sinusoidal.first_repeated_row(table) == expected
    assert sinusoidal.first_repeated_row(torch.eye(5)) is None


def test_first_nonfinite_row():
    table = torch.zeros(6, 3)
    assert sinusoidal.first_nonfinite_row(table) is None
    table[4, 1], table[2, 0] = float("inf"), float("nan")
    assert sinusoidal.first_nonfinite_row(table) == 2


def test_unseen_angle_gap_matches_brute_force():
    train, test, d, base = 20, 60, 8, 100.0
    expected = []
    for i in range(d // 2):
        w = base ** (-2 * i / d)
        gap = 0.0
        for q in range(train, test):
            nearest = min(abs(math.remainder(w * q - w * p, 2 * math.pi)) for p in range(train))
            gap = max(gap, nearest)
        expected.append(gap)
    torch.testing.assert_close(
        sinusoidal.unseen_angle_gap(train, test, d, base),
        torch.tensor(expected, dtype=torch.float64),
        rtol=0,
        atol=1e-12,
    )


def test_unseen_angle_gap_is_small_for_fast_pairs_and_large_for_slow_ones():
    gaps = sinusoidal.unseen_angle_gap(512, 2048, 512)
    slow = sinusoidal.wavelengths(512)[::2] > 4 * 512  # pairs that turn less than a quarter in training
    assert gaps[:20].max() < 0.3 and gaps[slow].min() > 0.1 and gaps.max() <= math.pi


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: sinusoidal.adjacent_change(torch.zeros(1, 4)), "at least 2 rows"),
        (lambda: sinusoidal.closest_distinct_rows(torch.zeros(5)), r"\(positions, d_model\)"),
        (lambda: sinusoidal.table_error([[0.0]]), r"\(positions, d_model\)"),
        (lambda: sinusoidal.dot_by_offset(-1, 8), "max_offset must be >= 0"),
        (lambda: sinusoidal.rotation_error(1, 8, length=0), "length must be >= 1"),
        (lambda: sinusoidal.naive_table(-1, 8, torch.float16), "length and offset must be >= 0"),
        (lambda: sinusoidal.naive_table(4, 7, torch.float16), "d_model must be a positive even number"),
        (lambda: sinusoidal.unseen_angle_gap(10, 10, 8), "train_len < test_len"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- figures ----------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_heatmap_shows_the_table_with_fast_dimensions_on_the_left():
    fig = sinusoidal.plot_heatmap(length=30, d_model=64, dims=16, base=100.0)
    ax = fig.axes[0]
    np.testing.assert_array_equal(ax.images[0].get_array(), sinusoidal_table(30, 64, 100.0)[:, :16].numpy())
    assert ax.get_xlabel() == "dimension index (0 = fastest)" and ax.get_ylabel() == "position"
    top = ax.child_axes[0]  # the wavelength axis
    ticks = [int(t) for t in top.get_xticks()]
    assert ticks[0] == 0 and ticks[-1] == 14
    labels = [float(t.get_text().replace(",", "")) for t in top.get_xticklabels()]
    expected = [2 * math.pi * 100.0 ** (2 * (j // 2) / 64) for j in ticks]
    assert all(math.isclose(a, b, rel_tol=5e-3) for a, b in zip(labels, expected, strict=False))
    assert labels == sorted(labels)  # wavelengths grow to the right


def test_explorer_figure_draws_the_table_and_its_columns():
    fig = sinusoidal.plot_explorer(d_model=32, base=1000.0, positions=50, halves=False)
    table = sinusoidal_table(50, 32, 1000.0).numpy()
    heat, curves = fig.axes[0], fig.axes[1]  # axes[2] is the colorbar
    np.testing.assert_array_equal(heat.images[0].get_array(), table)
    halves = sinusoidal.plot_explorer(d_model=32, base=1000.0, positions=50, halves=True).axes[0].images[0].get_array()
    np.testing.assert_array_equal(halves, sinusoidal.halves_layout(torch.from_numpy(table)).numpy())
    assert sinusoidal.explorer_dims(32) == [0, 4, 8, 16]
    dims = sinusoidal.explorer_dims(32)
    for line, j in zip(curves.lines, dims, strict=True):
        np.testing.assert_array_equal(line.get_ydata(), table[:, j])
        assert line.get_label().startswith(f"dim {j}: sine of pair {j // 2} ")
    # a triangle of each curve's colour marks its column: dimension j interleaved, column j // 2 in [sin | cos]
    for layout, columns in ((False, dims), (True, [j // 2 for j in dims])):
        fig = sinusoidal.plot_explorer(d_model=32, base=1000.0, positions=50, halves=layout)
        marks, lines = fig.axes[0].lines, fig.axes[1].lines
        assert [m.get_xdata()[0] for m in marks] == columns
        assert [m.get_color() for m in marks] == [line.get_color() for line in lines]


def test_windowed_mean_matches_the_mean_of_each_window():
    values = torch.randn(300, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    means = sinusoidal.windowed_mean(values)
    assert len(means) == int(299 / 1.1) + 1
    for k in (0, 1, 9, 10, 57, len(means) - 1):
        window = values[int(0.9 * k) : int(1.1 * k) + 1]
        assert math.isclose(means[k].item(), window.mean().item(), rel_tol=0, abs_tol=1e-12)
    with pytest.raises(ValueError, match="need 0 < low <= 1 <= high"):
        sinusoidal.windowed_mean(values, low=1.2)


def test_dot_by_offset_figure_plots_the_closed_form_and_marks_the_first_rise():
    fig = sinusoidal.plot_dot_by_offset(max_offset=200, d_models=(64,))
    ax = fig.axes[0]
    curve, marker, trend = ax.lines[:3]
    dots = sinusoidal.dot_by_offset(200, 64) / 32
    np.testing.assert_allclose(curve.get_ydata(), dots[1:].numpy(), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(curve.get_xdata(), np.arange(1, 201))
    rise = sinusoidal.first_rise(64)
    assert list(marker.get_xdata()) == [rise] and ax.get_xscale() == "log"
    # the trend: at offset k, the mean of the closed form over offsets 0.9k .. 1.1k, drawn from k = 20
    wide = sinusoidal.dot_by_offset(221, 64) / 32
    assert trend.get_xdata()[0] == 20 and trend.get_xdata()[-1] == 200
    for x, y in zip(trend.get_xdata()[::30], trend.get_ydata()[::30], strict=True):
        assert math.isclose(y, wide[int(0.9 * x) : int(1.1 * x) + 1].mean().item(), abs_tol=1e-12)


def test_unseen_angles_figure():
    fig = sinusoidal.plot_unseen_angles(train_len=64, test_len=256, d_model=32)
    ax = fig.axes[0]
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), sinusoidal.unseen_angle_gap(64, 256, 32).numpy())
    turned = int((sinusoidal.wavelengths(32)[::2] <= 64).sum())
    assert ax.lines[1].get_xdata()[0] == turned - 0.5


def test_pair_circles_update_points_at_the_table_row():
    fig, update = pair_animation.pair_circles(d_model=16, pairs=(0, 3), base=10000.0)
    row = sinusoidal_table(1, 16, offset=23)[0]
    hands = update(23)
    for hand, i in zip(hands, (0, 3), strict=False):
        x, y = hand.get_data()
        assert list(x) == [0, row[2 * i].item()] and list(y) == [0, row[2 * i + 1].item()]
        assert math.isclose(math.hypot(x[1], y[1]), 1.0, rel_tol=1e-6)
    assert fig.texts[0].get_text() == "position 23"


def test_animation_has_one_frame_per_position_a_stable_id_and_closes_its_figure():
    before = plt.get_fignums()
    html = pair_animation.animate_pairs(d_model=16, pairs=(0, 1), positions=5, name="demo_anim", colors=8)
    assert plt.get_fignums() == before
    frames = re.findall(r'frames\[(\d+)\] = "data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert [i for i, _ in frames] == ["0", "1", "2", "3", "4"]
    assert "new Array(5)" in html and "anim_imgdemo_anim" in html and "animdemo_anim" in html
    assert not re.search(r"[0-9a-f]{32}", html)  # to_jshtml's random uuid is gone
    assert pair_animation.animate_pairs(d_model=16, pairs=(0, 1), positions=5, name="demo_anim", colors=8) == html
    image = Image.open(io.BytesIO(base64.b64decode(frames[3][1])))
    assert image.mode == "P" and len(image.getcolors()) <= 8  # a palette PNG
    assert image.size[0] >= 2 * 216  # 144 dpi: twice the pixels of the 72-dpi version


def test_animation_names_its_frame_and_needs_no_icon_font():
    html = pair_animation.animate_pairs(d_model=16, pairs=(0, 1), positions=2, name="a", alt='hands "turning"')
    assert '<img id="_anim_imga" alt="hands &quot;turning&quot;"' in html
    assert "font-awesome" not in html and "fa fa-" not in html and "▶" in html


def test_animation_buttons_use_glyphs_that_common_fonts_have():
    """Every button's glyph is in DejaVu Sans (matplotlib ships a copy): a browser on Linux finds it, where the
    media-control symbols (U+23EE, U+23F8, U+23ED) show as empty boxes."""
    cmap = TTFont(Path(matplotlib.get_data_path()) / "fonts/ttf/DejaVuSans.ttf").getBestCmap()
    html = pair_animation.animate_pairs(d_model=16, pairs=(0, 1), positions=2, name="a")
    buttons = re.findall(r"<button[^>]*>\s*([^<]*?)\s*</button>", html)
    assert len(buttons) == 9 and all(buttons)
    assert [b for b in buttons if any(ord(c) not in cmap for c in b)] == []


def test_frame_strip_draws_each_hand_at_its_table_row():
    fig = pair_animation.frame_strip(d_model=16, pairs=(0, 3), positions=(0, 5))
    assert len(fig.axes) == 4
    row = sinusoidal_table(6, 16)[5]
    x, y = fig.axes[3].lines[1].get_data()  # position 5, pair 3: trail first, then the hand
    assert list(x) == [0, row[6].item()] and list(y) == [0, row[7].item()]
    assert len(fig.axes[3].lines[0].get_xdata()) == 5  # the trail: positions 0 .. 4
    with pytest.raises(ValueError, match="pairs must be indices"):
        pair_animation.frame_strip(d_model=16, pairs=(8,))
    plt.close(fig)


def test_pair_circles_trail_holds_the_earlier_positions():
    fig, update = pair_animation.pair_circles(d_model=16, pairs=(2,))
    update(6)
    trail = fig.axes[0].lines[0]
    table = sinusoidal_table(6, 16)
    np.testing.assert_allclose(trail.get_xdata(), table[:, 4].numpy())
    np.testing.assert_allclose(trail.get_ydata(), table[:, 5].numpy())
    assert fig.axes[0].get_title().startswith("pair 2 (dims 4, 5)")


def test_halves_layout_puts_sines_first():
    table = torch.arange(12.0).reshape(2, 6)  # columns s0 c0 s1 c1 s2 c2
    assert sinusoidal.halves_layout(table)[0].tolist() == [0.0, 2.0, 4.0, 1.0, 3.0, 5.0]


def test_heatmap_with_halves_shows_the_reordered_table():
    fig = sinusoidal.plot_heatmap(length=20, d_model=32, dims=8, halves=True)
    table = sinusoidal_table(20, 32)[:, :8]
    np.testing.assert_array_equal(fig.axes[1].images[0].get_array(), sinusoidal.halves_layout(table).numpy())


def test_offset_scores_figure():
    scores = torch.randn(10, 10, dtype=torch.float64)
    fig = sinusoidal.plot_offset_scores(scores, 3)
    ax = fig.axes[0]
    np.testing.assert_array_equal(ax.images[0].get_array(), scores.numpy())
    guide = ax.lines[0]
    assert list(guide.get_xdata()) == list(range(7)) and list(guide.get_ydata()) == list(range(3, 10))
    assert ax.get_xlabel() == "key position q" and ax.get_ylabel() == "query position p"


def test_score_terms_figure_uses_one_colour_scale():
    terms = {"a": torch.ones(4, 4), "b": -3 * torch.ones(4, 4)}
    fig = sinusoidal.plot_score_terms(terms)
    images = [ax.images[0] for ax in fig.axes[:2]]
    assert all(im.get_clim() == (-3.0, 3.0) for im in images)
    np.testing.assert_array_equal(images[1].get_array(), terms["b"].numpy())


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: sinusoidal.plot_heatmap(d_model=8, dims=16), r"dims must lie in \[2, d_model=8\]"),
        (lambda: sinusoidal.plot_explorer(positions=1), "positions must be >= 2"),
        (lambda: pair_animation.pair_circles(d_model=8, pairs=(4,)), r"pairs must be indices in \[0, d_model/2 = 4\)"),
        (lambda: pair_animation.animate_pairs(name="my-anim"), "JavaScript identifier"),
        (lambda: pair_animation.animate_pairs(positions=0), "positions must be >= 1"),
        (lambda: pair_animation.animate_pairs(colors=1), r"colors must be in \[2, 256\]"),
        (lambda: sinusoidal.plot_offset_scores(torch.zeros(3, 4), 1), "square"),
        (lambda: sinusoidal.plot_score_terms({}), "terms must map"),
    ],
)
def test_figures_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()
    plt.close("all")
