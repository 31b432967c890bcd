"""The input-layer map of the introduction."""

import matplotlib.pyplot as plt
import pytest
from matplotlib.patches import FancyBboxPatch

from course_embed.lab import diagram


@pytest.fixture(autouse=True)
def close():
    yield
    plt.close("all")


def _boxes(fig):
    return {p.get_gid(): p for p in fig.axes[0].patches if isinstance(p, FancyBboxPatch)}


def test_every_box_is_drawn_in_order_with_its_label():
    fig = diagram.draw_input_layer()
    boxes = _boxes(fig)
    assert list(boxes) == [f"box-{name}" for name in diagram.BOXES]
    xs = [b.get_x() for b in boxes.values()]
    assert xs == sorted(xs)  # data flows left to right
    texts = [t.get_text() for t in fig.axes[0].texts]
    for label, chapters in diagram.BOXES.values():
        assert label in texts and (not chapters or chapters in texts)
    assert any("tied" in t for t in texts)
    for name in ("scale", "position", "layernorm", "dropout", "final_norm"):  # only some models have them
        assert boxes[f"box-{name}"].get_linestyle() == "--"
    for name in ("ids", "lookup", "attention", "layers", "output"):
        assert boxes[f"box-{name}"].get_linestyle() == "-"
    assert diagram.LEGEND in texts and "dashed" in diagram.LEGEND
    assert diagram.FOOTER in texts and "ch. 6" in diagram.FOOTER and "ch. 7" in diagram.FOOTER
    assert list(diagram.BOXES).index("final_norm") == list(diagram.BOXES).index("output") - 1
    assert "logits" in fig.axes[0].get_title()


def test_highlight_colours_one_box():
    fig = diagram.draw_input_layer(highlight="scale")
    faces = {name: box.get_facecolor() for name, box in _boxes(fig).items()}
    assert faces["box-scale"] != faces["box-lookup"]
    assert len({f for n, f in faces.items() if n not in ("box-scale", "box-layers")}) == 1
    assert "scale" in fig.axes[0].get_title()


def test_unknown_box_is_rejected():
    with pytest.raises(ValueError, match="highlight must be one of"):
        diagram.draw_input_layer(highlight="embedding")
