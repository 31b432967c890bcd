"""The explorers work without a browser: moving a slider redraws the figure from the package's table."""

import io

import ipywidgets
import matplotlib.pyplot as plt
import numpy as np
import pytest
from PIL import Image

from course_embed import sinusoidal_table
from course_embed.lab import sinusoidal, widgets


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def heatmap(explorer):
    return explorer.figure.axes[0].images[0].get_array()


def test_explorer_starts_from_the_defaults_and_shows_a_png():
    before = plt.get_fignums()
    explorer = widgets.SinusoidalExplorer()
    assert plt.get_fignums() == before  # the figure is closed: a notebook shows it only inside the widget
    d, base, s = (widgets.EXPLORER_DEFAULTS[k] for k in ("d_model", "base", "positions"))
    assert (explorer.d_model.value, explorer.base.value, explorer.positions.value) == (d, base, s)
    # interleaved by default: the layout whose dimension indices the chapter and the curves' labels use
    assert explorer.halves.value is widgets.EXPLORER_DEFAULTS["halves"] is False
    expected = sinusoidal_table(s, d, base)
    np.testing.assert_array_equal(heatmap(explorer), expected.numpy())
    assert isinstance(explorer.widget, ipywidgets.VBox) and explorer.image in explorer.widget.children
    png = Image.open(io.BytesIO(explorer.image.value))
    # Agg truncates the figure's size in pixels (4.8 in at 72 dpi is 345 rows)
    width, height = (int(inches * 72) for inches in explorer.figure.get_size_inches())
    assert png.format == "PNG" and png.size == (width, height)


def test_moving_the_sliders_redraws_from_the_table():
    explorer = widgets.SinusoidalExplorer(d_model=16, base=100.0, positions=20, halves=False)
    first_png = explorer.image.value
    explorer.d_model.value = 48
    np.testing.assert_array_equal(heatmap(explorer), sinusoidal_table(20, 48, 100.0).numpy())
    explorer.positions.value = 70
    explorer.base.value = 1000.0
    table = sinusoidal_table(70, 48, 1000.0).numpy()
    np.testing.assert_array_equal(heatmap(explorer), table)
    curves = explorer.figure.axes[1]  # axes[2] is the colorbar
    for line, j in zip(curves.lines, sinusoidal.explorer_dims(48), strict=True):
        np.testing.assert_array_equal(line.get_ydata(), table[:, j])
    assert explorer.image.value != first_png


def test_sliders_keep_d_model_even():
    explorer = widgets.SinusoidalExplorer()
    explorer.d_model.value = 61  # an odd width has no sin/cos pairs: snapped to the slider's step of 8
    assert explorer.d_model.value == 64
    assert heatmap(explorer).shape == (explorer.positions.value, explorer.d_model.value)


def test_the_layout_toggle_redraws_interleaved_or_in_halves():
    explorer = widgets.SinusoidalExplorer(d_model=16, base=100.0, positions=20, halves=False)
    table = sinusoidal_table(20, 16, 100.0)
    np.testing.assert_array_equal(heatmap(explorer), table.numpy())
    explorer.halves.value = True
    np.testing.assert_array_equal(heatmap(explorer), sinusoidal.halves_layout(table).numpy())
