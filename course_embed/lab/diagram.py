"""The course's map: a labelled drawing of a Transformer's input layer, with the box each chapter studies.

The introduction draws it whole; a chapter draws it with its own box highlighted (``highlight="lookup"``).
Box names, left to right (see :data:`BOXES`): ``ids``, ``lookup``, ``scale``, ``position``, ``layernorm``,
``dropout``, ``attention``, ``layers``, ``final_norm``, ``output``.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

#: ``name: (label drawn in the box, chapters that study it)``, in data-flow order.
BOXES = {
    "ids": ("token ids\n(batch, seq)", "tokenizer"),
    "lookup": ("lookup\nW[ids]", "ch. 1"),
    "scale": ("× √d", "ch. 2"),
    "position": ("+ position\nvectors", "ch. 3, 5"),
    "layernorm": ("LayerNorm", "ch. 4"),
    "dropout": ("dropout", "ch. 4"),
    "attention": ("attention\nlayer 1\nq·k, softmax", "ch. 5: RoPE,\nALiBi act here"),
    "layers": ("layers\n2 … N", ""),
    "final_norm": ("final\nnorm", "pre-LN\nmodels"),
    "output": ("output layer\nlogits = h Wᵀ", "ch. 1, 2"),
}
#: Boxes drawn with a dashed edge: only some models have them. BERT, GPT-2 and LLaMA do not scale by √d;
#: LLaMA adds no position vector (RoPE acts inside attention); GPT-2 and LLaMA have no LayerNorm here;
#: LLaMA has no input dropout; a post-LN model (the original Transformer, BERT) has no final norm, a pre-LN one
#: (GPT-2, LLaMA) normalises the last layer's output before the logits.
OPTIONAL = ("scale", "position", "layernorm", "dropout", "final_norm")
#: The note under the boxes' right end: the chapters about the whole path rather than one box.
FOOTER = "ch. 6: where the time and memory go; ch. 7: training choices for big vocabularies"
#: The legend drawn under the boxes.
LEGEND = "dashed box: only some models have it"


def draw_input_layer(highlight: str | None = None):
    """Draw the input layer as a row of labelled boxes; returns the ``Figure`` (never shown here).

    Args:
        highlight: a key of :data:`BOXES` to fill in colour (the box a chapter is about), or ``None``.

    The token table ``W`` appears twice, as the lookup and as the output layer, joined by a curved
    "same W (tied)" arrow; a footnote names chapters 6 and 7, which study the whole row.
    """
    if highlight is not None and highlight not in BOXES:
        raise ValueError(f"highlight must be one of {tuple(BOXES)} or None, got {highlight!r}")
    fig, ax = plt.subplots(figsize=(12, 3.4))
    width, height, gap = 1.0, 0.9, 0.2
    centres = {}
    for i, (name, (label, chapters)) in enumerate(BOXES.items()):
        x = i * (width + gap)
        centres[name] = x + width / 2
        face = "tab:orange" if name == highlight else ("whitesmoke" if name != "layers" else "white")
        box = FancyBboxPatch(
            (x, 0),
            width,
            height,
            boxstyle="round,pad=0.03",
            facecolor=face,
            edgecolor="black",
            linestyle="--" if name in OPTIONAL else "-",
            linewidth=2.0 if name == highlight else 1.0,
            gid=f"box-{name}",
        )
        ax.add_patch(box)
        ax.text(
            x + width / 2,
            height / 2,
            label,
            ha="center",
            va="center",
            fontsize=10,
            fontweight="bold" if name == highlight else "normal",
        )
        ax.text(x + width / 2, -0.12, chapters, ha="center", va="top", fontsize=9.5, color="dimgray")
        if i:
            ax.add_patch(
                FancyArrowPatch(
                    (x - gap, height / 2), (x, height / 2), arrowstyle="-|>", mutation_scale=10, color="black"
                )
            )
    tie = FancyArrowPatch(
        (centres["lookup"], height + 0.03),
        (centres["output"], height + 0.03),
        connectionstyle="arc3,rad=-0.12",
        arrowstyle="<|-|>",
        mutation_scale=10,
        color="tab:blue",
        linestyle="--",
    )
    ax.add_patch(tie)
    middle = (centres["lookup"] + centres["output"]) / 2
    ax.text(
        middle,
        height + 0.62,
        "the same (V, d) table W when input and output are tied",
        ha="center",
        va="bottom",
        fontsize=10,
        color="tab:blue",
    )
    ax.text(
        centres["output"] + width / 2,
        -0.55,
        FOOTER,
        ha="right",
        va="top",
        fontsize=9.5,
        color="dimgray",
        style="italic",
    )
    ax.text(
        centres["ids"] - width / 2,
        -0.55,
        LEGEND,
        ha="left",
        va="top",
        fontsize=9.5,
        color="dimgray",
        style="italic",
    )
    ax.set_xlim(-0.1, len(BOXES) * (width + gap))
    ax.set_ylim(-0.8, height + 0.9)
    ax.set_axis_off()
    title = "The input layer and what it feeds: from token ids to the logits"
    ax.set_title(title if highlight is None else f"{title} (this chapter: {highlight})", fontsize=10)
    fig.tight_layout()
    return fig
