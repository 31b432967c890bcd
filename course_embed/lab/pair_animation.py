"""Chapter 3's animation: each sine-cosine pair of the encoding as a point turning on its unit circle.

Shapes: ``d`` model width (even), ``p = d / 2`` pairs. The animation is HTML (``to_jshtml``: PNG frames and inline
JavaScript) so that it plays on the static site.
"""

from __future__ import annotations

import base64
import io
import re
from html import escape

import matplotlib.pyplot as plt
from matplotlib import animation, patches
from PIL import Image

from ..sinusoidal import sinusoidal_table
from .sinusoidal import wavelengths


def pair_circles(d_model: int = 64, pairs: tuple[int, ...] = (0, 4, 8, 16), base: float = 10000.0):
    """One unit disc per sin/cos pair, with a hand pointing at ``(x, y) = (PE[p, 2i], PE[p, 2i + 1])`` and a faint
    trail of the points of the earlier positions (the angles a model trained on ``0 .. p`` has seen).

    Returns ``(fig, update)``; ``update(p)`` moves every hand to position ``p`` and returns the hands (``Line2D``,
    data ``([0, sin], [0, cos])``).
    """
    half = d_model // 2
    if not pairs or any(not 0 <= i < half for i in pairs):
        raise ValueError(f"pairs must be indices in [0, d_model/2 = {half}), got {pairs}")
    lengths = wavelengths(d_model, base)
    fig, axes = plt.subplots(1, len(pairs), figsize=(1.6 * len(pairs), 2.0), dpi=144)
    axes = [axes] if len(pairs) == 1 else list(axes)
    hands, trails = [], []
    for ax, i in zip(axes, pairs, strict=False):
        # a flat disc without antialiasing keeps every PNG frame small
        ax.add_patch(patches.Circle((0, 0), 1, facecolor="#e8eef6", edgecolor="none", antialiased=False))
        (trail,) = ax.plot([], [], "o", color="tab:orange", ms=2.5, alpha=0.6)
        (hand,) = ax.plot([0, 0], [0, 1], "-o", color="tab:blue", markevery=[1])
        hands.append(hand)
        trails.append(trail)
        ax.set_aspect("equal")
        ax.set_xlim(-1.2, 1.2)
        ax.set_ylim(-1.2, 1.2)
        ax.axis("off")
        ax.set_title(f"pair {i} (dims {2 * i}, {2 * i + 1})\nwavelength {lengths[2 * i].item():.3g}", fontsize=8)
    _label_axes(axes[0])
    title = fig.suptitle("position 0", fontsize=9)
    fig.tight_layout()

    def update(p: int):
        table = sinusoidal_table(p + 1, d_model, base)  # (p + 1, d): this position and the earlier ones
        for hand, trail, i in zip(hands, trails, pairs, strict=False):
            hand.set_data([0, table[p, 2 * i].item()], [0, table[p, 2 * i + 1].item()])
            trail.set_data(table[:p, 2 * i].numpy(), table[:p, 2 * i + 1].numpy())
        title.set_text(f"position {p}")
        return hands

    return fig, update


def _label_axes(ax) -> None:
    """Name the disc's coordinates: x is the pair's sine, y its cosine."""
    ax.text(0, -1.32, "x = sin", ha="center", va="top", fontsize=7)
    ax.text(-1.32, 0, "y = cos", ha="right", va="center", rotation=90, fontsize=7)


def frame_strip(d_model: int = 64, pairs: tuple[int, ...] = (0, 4, 8, 16), positions=(0, 1, 5, 12, 23)):
    """A static stand-in for :func:`animate_pairs`: one row of discs per position in ``positions``.

    Each disc shows the hand at ``(PE[p, 2i], PE[p, 2i + 1])`` and the trail of the earlier positions, as the
    animation's frame ``p`` does; for readers of the PDF and pages without JavaScript.
    """
    positions = list(positions)
    if not positions or min(positions) < 0:
        raise ValueError(f"positions must be a non-empty list of positions >= 0, got {positions}")
    half = d_model // 2
    if not pairs or any(not 0 <= i < half for i in pairs):
        raise ValueError(f"pairs must be indices in [0, d_model/2 = {half}), got {pairs}")
    table = sinusoidal_table(max(positions) + 1, d_model)  # (s, d)
    fig, axes = plt.subplots(
        len(positions), len(pairs), figsize=(1.25 * len(pairs) + 0.5, 1.25 * len(positions) + 0.3), squeeze=False
    )
    for row, p in zip(axes, positions, strict=True):
        for ax, i in zip(row, pairs, strict=True):
            ax.add_patch(patches.Circle((0, 0), 1, facecolor="#e8eef6", edgecolor="none"))
            ax.plot(table[:p, 2 * i].numpy(), table[:p, 2 * i + 1].numpy(), "o", color="tab:orange", ms=2, alpha=0.6)
            ax.plot([0, table[p, 2 * i].item()], [0, table[p, 2 * i + 1].item()], "-o", color="tab:blue", markevery=[1])
            ax.set_aspect("equal")
            ax.set_xlim(-1.2, 1.2)
            ax.set_ylim(-1.2, 1.2)
            ax.axis("off")
            if p == positions[0]:
                ax.set_title(f"pair {i}", fontsize=8)
        row[-1].text(1.45, 0, f"p = {p}", ha="left", va="center", fontsize=8)
    _label_axes(axes[-1][0])
    fig.suptitle("The hands at a few positions (each turns clockwise)", fontsize=9)
    fig.tight_layout()
    return fig


#: Font Awesome icons of ``to_jshtml``'s buttons, as text: the page needs no stylesheet from the network. Each glyph
#: is in DejaVu Sans and WenQuanYi Micro Hei, the fonts a Linux browser falls back to (the media-control symbols
#: U+23EE, U+23F8 and U+23ED are in neither and show as empty boxes).
_ICONS = {
    "fa fa-fast-backward": "⇤",
    "fa fa-step-backward": "◁",
    "fa fa-play fa-flip-horizontal": "◀",
    "fa fa-pause": "‖",
    "fa fa-play": "▶",
    "fa fa-step-forward": "▷",
    "fa fa-fast-forward": "⇥",
    "fa fa-minus": "−",
    "fa fa-plus": "+",
}


def _quantize_png(match: re.Match, colors: int) -> str:
    data = match.group(1).replace("\\\n", "")  # to_jshtml breaks the base64 text with backslash-newlines
    image = Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")
    buffer = io.BytesIO()
    image.quantize(colors=colors, dither=Image.Dither.NONE).save(buffer, format="png", optimize=True)
    return f'data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}"'


def animate_pairs(
    d_model: int = 64,
    pairs: tuple[int, ...] = (0, 4, 8, 16),
    positions: int = 24,
    base: float = 10000.0,
    name: str = "pairs",
    interval: int = 450,
    colors: int = 16,
    alt: str = "Animation: each sine-cosine pair of the encoding as a hand turning on its unit circle.",
) -> str:
    """An HTML animation (``to_jshtml``: PNG frames and inline JavaScript) of :func:`pair_circles` for positions
    ``0 .. positions - 1``, one frame each; it plays on a static page, without a kernel.

    Frames are drawn at 144 dpi and stored as ``colors``-colour palette PNGs, which keeps a sharp animation small.
    ``to_jshtml`` names its elements with a random id; it is replaced by ``name`` (a JavaScript identifier) so
    that re-running a notebook stores the same HTML. The frame carries ``alt`` as its alternative text, and the
    buttons' Font Awesome icons (a stylesheet loaded from a CDN) become text symbols, so the controls show offline
    and in print. The figure is closed, so a notebook shows it only once.
    """
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"name must be a JavaScript identifier (letters, digits, _), got {name!r}")
    if positions < 1:
        raise ValueError(f"positions must be >= 1 (one frame per position), got {positions}")
    if not 2 <= colors <= 256:
        raise ValueError(f"colors must be in [2, 256] (a PNG palette), got {colors}")
    fig, update = pair_circles(d_model, pairs, base)
    html = animation.FuncAnimation(fig, update, frames=positions, interval=interval).to_jshtml(default_mode="loop")
    plt.close(fig)
    random_id = re.search(r"_anim_img([0-9a-f]{32})", html).group(1)
    html = re.sub(r'data:image/png;base64,([A-Za-z0-9+/=\\\n]+)"', lambda m: _quantize_png(m, colors), html)
    html = re.sub(r'<link rel="stylesheet"\s+href="[^"]*font-awesome[^"]*">', "", html)
    for icon, symbol in _ICONS.items():
        html = html.replace(f'<i class="{icon}"></i>', symbol)
    html = html.replace(f'<img id="_anim_img{random_id}"', f'<img id="_anim_img{random_id}" alt="{escape(alt)}"')
    return html.replace(random_id, name)
