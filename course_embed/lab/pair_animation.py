"""Chapter 3's animation: each sine-cosine pair of the encoding as a point turning on its unit circle.

Shapes: ``d`` model width (even), ``p = d / 2`` pairs. The animation is HTML (``to_jshtml``: PNG frames and inline
JavaScript) so that it plays on the static site.
"""

from __future__ import annotations

import base64
import io
import re

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
) -> str:
    """An HTML animation (``to_jshtml``: PNG frames and inline JavaScript) of :func:`pair_circles` for positions
    ``0 .. positions - 1``, one frame each; it plays on a static page, without a kernel.

    Frames are drawn at 144 dpi and stored as ``colors``-colour palette PNGs, which keeps a sharp animation small.
    ``to_jshtml`` names its elements with a random id; it is replaced by ``name`` (a JavaScript identifier) so
    that re-running a notebook stores the same HTML. The figure is closed, so a notebook shows it only once.
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
    return html.replace(random_id, name)
