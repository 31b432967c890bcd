"""Chapter 2 figures (course_embed.plots, section "the sqrt(d) scaling"): they draw the numbers they are given."""

import io

import matplotlib
import matplotlib.pyplot as plt
import pytest
from matplotlib.patches import Rectangle

from course_embed import plots

NORMS = {"normal": (22.6, 512.0), "xavier_uniform": (0.31, 7.06), "scaled_normal": (1.0, 22.6)}


@pytest.fixture(autouse=True)
def no_show_and_close(monkeypatch):
    """Figures are returned, never shown; close them after each test."""
    def show(*args, **kwargs):
        raise AssertionError("plots functions must not call plt.show()")
    monkeypatch.setattr(plt, "show", show)
    yield
    plt.close("all")


def _bars(ax):
    return [p for p in ax.patches if isinstance(p, Rectangle)]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def test_row_norm_bars_show_the_given_norms_and_the_position_line():
    fig = plots.plot_row_norms(NORMS, 16.0, 512)
    assert isinstance(fig, matplotlib.figure.Figure)
    ax = fig.axes[0]
    heights = sorted(round(b.get_height(), 6) for b in _bars(ax))
    assert heights == sorted(v for pair in NORMS.values() for v in pair)
    assert ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == list(NORMS)
    hlines = [line for line in ax.get_lines() if list(line.get_ydata()) == [16.0, 16.0]]
    assert len(hlines) == 1
    assert _png(fig).startswith(b"\x89PNG")


@pytest.mark.parametrize("norms, match", [({}, "empty"), ({"normal": (1.0,)}, "pair"),
                                          ({"normal": (0.0, 1.0)}, "positive")])
def test_row_norm_bars_bad_input(norms, match):
    with pytest.raises(ValueError, match=match):
        plots.plot_row_norms(norms, 16.0, 512)


def test_norm_ratio_lines_follow_the_data():
    d_models = [64, 256, 1024]
    ratios = {"normal": [11.3, 22.6, 45.3], "scaled_normal": [1.41, 1.41, 1.41]}
    fig = plots.plot_norm_ratio(d_models, ratios)
    ax = fig.axes[0]
    data = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}
    for label, values in ratios.items():
        assert data[label] == (d_models, values)
    assert list(data["equal norms"][1]) == [1.0, 1.0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert _png(fig).startswith(b"\x89PNG")


@pytest.mark.parametrize("d_models, ratios, match", [
    ([64, 128], {"a": [1.0]}, "1 values for 2 widths"),
    ([], {"a": []}, "d_models is empty"),
    ([64], {}, "ratios is empty"),
    ([64], {"a": [-1.0]}, "positive"),
])
def test_norm_ratio_bad_input(d_models, ratios, match):
    with pytest.raises(ValueError, match=match):
        plots.plot_norm_ratio(d_models, ratios)


def test_probe_bars_show_accuracies_and_chance():
    labels, accuracies = ["a", "b", "c"], [1.0, 0.02, 0.86]
    fig = plots.plot_probe_accuracy(labels, accuracies, 1 / 64)
    ax = fig.axes[0]
    assert [round(b.get_width(), 6) for b in _bars(ax)] == accuracies
    assert [t.get_text() for t in ax.get_yticklabels()] == labels
    vlines = [line for line in ax.get_lines() if list(line.get_xdata()) == [1 / 64, 1 / 64]]
    assert len(vlines) == 1
    assert _png(fig).startswith(b"\x89PNG")


@pytest.mark.parametrize("labels, accuracies, chance, match", [
    (["a"], [0.5, 0.6], 0.1, "one each"),
    (["a"], [1.5], 0.1, r"\[0, 1\]"),
    ([], [], 0.1, "empty"),
])
def test_probe_bars_bad_input(labels, accuracies, chance, match):
    with pytest.raises(ValueError, match=match):
        plots.plot_probe_accuracy(labels, accuracies, chance)
