"""The roofline helpers: intensity formula, sweep shape, and the figure's placement of points."""

import pytest

from course_embed.lab import roofline


def test_input_layer_intensity_is_flops_over_minimum_bytes():
    b, s, d = 2, 3, 4
    assert roofline.input_layer_intensity(b, s, d) == 2 * b * s * d / (4 * (2 * b * s * d + s * d))
    assert roofline.input_layer_intensity(32, 128, 512) == pytest.approx(0.25, rel=0.02)
    for b in (1, 3, 32):  # b / (4 b + 2) in float32, whatever s and d: 1/6 at batch 1
        assert roofline.input_layer_intensity(b, 7, 24) == pytest.approx(b / (4 * b + 2), rel=1e-12)
    assert roofline.input_layer_intensity(1, 8, 8, itemsize=2) == 2 * 64 / (2 * (2 * 64 + 64))


def test_sweep_reports_each_size_with_a_positive_bandwidth():
    sweep = roofline.bandwidth_sweep([1 << 12, 1 << 16], min_run_time=1e-3)
    assert [n for n, _ in sweep] == [1 << 12, 1 << 16] and all(g > 0 for _, g in sweep)
    assert roofline.matmul_gflops(32, min_run_time=1e-3) > 0


def test_figure_places_each_variant():
    sweep = [(1 << 20, 40.0), (1 << 26, 10.0)]
    fig = roofline.roofline_figure(sweep, 100.0, {"a": (1 << 24, 5.0, 0.25), "b": (1 << 24, 8.0, 0.25)})
    left, right = fig.axes
    assert left.get_ylabel() == "bandwidth (GB/s)" and right.get_xlabel() == "arithmetic intensity (FLOP per byte)"
    points = {
        line.get_label(): (line.get_xdata()[0], line.get_ydata()[0])
        for line in right.get_lines()
        if line.get_label() in ("a", "b")
    }
    assert points == {"a": (0.25, 1.25), "b": (0.25, 2.0)}  # GFLOP/s = GB/s * FLOP/byte
    assert "ridge at 10 FLOP/byte" in right.get_title()  # 100 GFLOP/s over the largest size's 10 GB/s
