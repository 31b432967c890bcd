"""Chapter 4 figures: they draw exactly the numbers they are given, and reject bad input."""

import io

import pytest
from matplotlib.figure import Figure

from course_embed import plots


def png_bytes(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def test_fusion_probe_figure_draws_the_given_accuracies():
    d = [16, 64, 256]
    acc = {"add": [0.2, 0.5, 0.8], "concat": [1.0, 1.0, 1.0]}
    fig = plots.plot_fusion_probe(d, acc, chance=1 / 64)
    assert isinstance(fig, Figure)
    lines = fig.axes[0].get_lines()
    assert [list(line.get_ydata()) for line in lines[:2]] == [acc["add"], acc["concat"]]
    assert list(lines[0].get_xdata()) == d
    assert list(lines[2].get_ydata()) == [1 / 64, 1 / 64]  # the chance line
    assert fig.axes[0].get_xscale() == "log"
    assert png_bytes(fig).startswith(b"\x89PNG")


@pytest.mark.parametrize("d, acc, match", [
    ([16, 64], {"add": [0.1]}, r"accuracies\['add'\] must hold 2 values, got 1"),
    ([16, 64], {}, "accuracies is empty"),
    ([0, 64], {"add": [0.1, 0.2]}, "d_models must be positive"),
])
def test_fusion_probe_figure_bad_input(d, acc, match):
    with pytest.raises(ValueError, match=match):
        plots.plot_fusion_probe(d, acc, chance=0.1)


def test_dropout_average_figure_is_log_log_with_both_series():
    n, measured, predicted = [1, 10, 100], [0.2, 0.07, 0.02], [0.2, 0.075, 0.025]
    fig = plots.plot_dropout_average(n, measured, predicted)
    ax = fig.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert [list(line.get_ydata()) for line in ax.get_lines()] == [predicted, measured]
    assert png_bytes(fig).startswith(b"\x89PNG")


@pytest.mark.parametrize("args, match", [
    (([1, 10], [0.1], [0.1, 0.2]), "measured must hold 2 values"),
    (([1, 10], [0.1, 0.0], [0.1, 0.2]), "measured must be positive"),
    (([], [], []), "n_samples must hold at least one"),
])
def test_dropout_average_figure_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        plots.plot_dropout_average(*args)
