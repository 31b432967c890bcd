"""ipywidgets explorers for readers who run the chapters.

Each explorer draws with a :mod:`course_embed.lab.sinusoidal` function and shows the figure as a PNG in an ``Image``
widget, so the picture is part of the widget's state: it is stored in the executed notebook and appears on the
static site (without working sliders), and tests can drive the sliders without a browser.
"""

from __future__ import annotations

import io

import ipywidgets as w
import matplotlib.pyplot as plt

from . import sinusoidal

#: Slider values the sinusoidal explorer starts from; the chapter's static figure uses the same values.
EXPLORER_DEFAULTS = {"d_model": 128, "base": 10000.0, "positions": 100, "halves": False}


class SinusoidalExplorer:
    """Sliders for ``d_model``, ``base`` and the number of positions, and a layout toggle, over
    :func:`course_embed.lab.sinusoidal.plot_explorer`.

    Attributes:
        d_model, base, positions: the slider widgets (``d_model`` in steps of 8, ``base`` on a log scale).
        halves: the checkbox choosing the ``[sin | cos]`` layout (checked) or the interleaved columns (the
            default, the layout whose dimension indices the chapter and the curves use).
        figure: the last figure drawn (closed, so a notebook does not show it a second time); its heatmap holds the
            ``(positions, d_model)`` table.
        image: the ``Image`` widget showing ``figure`` as PNG.
        widget: the whole explorer; display it (or end a cell with it) to show it.
    """

    def __init__(
        self,
        d_model: int = EXPLORER_DEFAULTS["d_model"],
        base: float = EXPLORER_DEFAULTS["base"],
        positions: int = EXPLORER_DEFAULTS["positions"],
        halves: bool = EXPLORER_DEFAULTS["halves"],
    ):
        style, layout = {"description_width": "80px"}, w.Layout(width="480px")
        self.d_model = w.IntSlider(
            value=d_model,
            min=8,
            max=512,
            step=8,
            description="d_model",
            continuous_update=False,
            style=style,
            layout=layout,
        )
        self.base = w.FloatLogSlider(
            value=base,
            base=10,
            min=1,
            max=5,
            step=0.25,
            description="base",
            readout_format=".0f",
            continuous_update=False,
            style=style,
            layout=layout,
        )
        self.positions = w.IntSlider(
            value=positions,
            min=10,
            max=1000,
            step=10,
            description="positions",
            continuous_update=False,
            style=style,
            layout=layout,
        )
        self.halves = w.Checkbox(value=halves, description="[sin | cos] layout (unchecked: interleaved)", indent=False)
        self.image = w.Image(format="png")
        self.widget = w.VBox([self.d_model, self.base, self.positions, self.halves, self.image])
        for slider in (self.d_model, self.base, self.positions, self.halves):
            slider.observe(self.redraw, names="value")
        self.redraw()

    def redraw(self, change=None) -> None:
        """Draw the figure for the current slider values into ``image`` (called whenever a slider moves)."""
        step = self.d_model.step
        if self.d_model.value % step:  # set from Python, a value is not snapped to the step as in the browser
            self.d_model.value = max(step, step * round(self.d_model.value / step))
            return  # that change redraws
        fig = sinusoidal.plot_explorer(self.d_model.value, self.base.value, self.positions.value, self.halves.value)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=72)
        plt.close(fig)
        self.figure = fig
        self.image.value = buffer.getvalue()
