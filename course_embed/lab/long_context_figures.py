"""Figures of chapter 5 (positions for long sequences): what the chapter computes, drawn.

Each function takes arrays the chapter has already computed on the page and returns a matplotlib ``Figure``; none
computes a result of its own. The study's figures share one picture, :func:`bands`: per model, the mean over seeds
as a line and the range from the best to the worst seed as a band. Arrays are numpy or torch, on the CPU.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import animation

from .diagnostics import spread


def bands(ax, x, rows: Mapping[str, np.ndarray], colors: Mapping[str, object] | None = None, **line) -> None:
    """On ``ax``, for every ``name -> values`` of shape ``(seeds, len(x))``: the mean over seeds as a line labelled
    ``name`` and the min-max band; rows with fewer columns than ``x`` are drawn over its first ones (the learned
    table, which exists only up to the training length). ``colors`` maps names to colours (default: the colour
    cycle); ``line`` holds keyword arguments of ``ax.plot`` (a per-name dict under the key ``styles`` is merged into
    them)."""
    styles = line.pop("styles", {})
    for name, values in rows.items():
        mean, low, high = spread(np.asarray(values, dtype=float))
        xs = np.asarray(x)[: len(mean)]
        kwargs = {**line, **styles.get(name, {})}
        if colors is not None:
            kwargs["color"] = colors[name]
        (drawn,) = ax.plot(xs, mean, label=name, **kwargs)
        ax.fill_between(xs, low, high, color=drawn.get_color(), alpha=0.15, lw=0)


def _length_axis(ax, lengths: Sequence[int], train_len: int) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(lengths), [f"{n / train_len:g}x" for n in lengths])


def band_panels(
    x,
    panels: Mapping[str, Mapping[str, np.ndarray]],
    *,
    xlabel: str,
    ylabel: str,
    colors: Mapping[str, object] | None = None,
    train_len: int | None = None,
    vline: float | None = None,
    legend_panel: int = -1,
    panel_width: float = 3.6,
    **line,
):
    """One panel of :func:`bands` per ``title -> rows`` of ``panels``, sharing the y axis; one legend, beside
    panel ``legend_panel``, for the lines of the first panel (which must hold every name). With ``train_len`` the
    x axis is log-2 with ticks ``1x, 2x, ...``; ``vline`` draws a dotted vertical line. Returns ``(fig, axes)``."""
    fig, axes = plt.subplots(1, len(panels), figsize=(panel_width * len(panels) + 1.6, 3.2), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, (title, rows) in zip(axes, panels.items(), strict=True):
        bands(ax, x, rows, colors, **line)
        if train_len is not None:
            _length_axis(ax, x, train_len)
        if vline is not None:
            ax.axvline(vline, color="0.6", ls=":", lw=1)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xlabel)
    axes[0].set_ylabel(ylabel)
    handles, names = axes[0].get_legend_handles_labels()
    axes[legend_panel].legend(handles, names, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig, axes


def rope_pairs_animation(rotated: Callable[[int], tuple], rates: Sequence[float], gap: int, frames: int = 24) -> str:
    """An HTML animation (PNG frames and JavaScript, so it plays on a static site) of two RoPE pairs.

    ``rotated(m)`` returns ``(q, k, score)``: the rotated query at ``m + gap`` and key at ``m``, both of shape
    ``(4,)`` (pair 0 = dims 0, 1; pair 1 = dims 2, 3), and their score. Frame ``m`` draws both pairs as arrows
    on unit circles and prints the score; ``rates`` ``(2,)`` are the pairs' angles per position, for the titles.
    The player's random id is replaced by a fixed one and the description goes into the ``<img>`` tag as alt text.
    """
    fig, axes = plt.subplots(1, 2, figsize=(4.6, 2.5), dpi=100)
    arrows = []
    for pair, (ax, speed) in enumerate(zip(axes, ("fast", "slow"), strict=True)):
        ax.add_patch(plt.Circle((0, 0), 1, fill=False, color="0.8", antialiased=False))  # flat: small PNGs
        style = dict(markevery=[1], antialiased=False)
        (q_line,) = ax.plot([], [], "-o", color="tab:blue", label="query at m", **style)
        (k_line,) = ax.plot([], [], "-o", color="tab:orange", label=f"key at m - {gap}", **style)
        arrows.append((pair, q_line, k_line))
        ax.set_xlim(-1.15, 1.15)
        ax.set_ylim(-1.15, 1.15)
        ax.set_aspect("equal")
        ax.axis("off")
        ax.set_title(f"pair {pair}, {speed}: {float(rates[pair]):.1f} rad/position", fontsize=8)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, fontsize=7, loc="lower center", ncol=2, frameon=False)
    title = fig.suptitle("", fontsize=9)

    def draw(m):
        q, k, score = rotated(m)
        for pair, q_line, k_line in arrows:
            q_line.set_data([0, float(q[2 * pair])], [0, float(q[2 * pair + 1])])
            k_line.set_data([0, float(k[2 * pair])], [0, float(k[2 * pair + 1])])
        title.set_text(f"query at m = {m + gap}, key at {m}: score {score:+.3f}")
        return [line for _, q_line, k_line in arrows for line in (q_line, k_line)]

    movie = animation.FuncAnimation(fig, draw, frames=frames, interval=350)
    page = movie.to_jshtml(default_mode="loop")
    plt.close(fig)
    page = page.replace(re.search(r"_anim_img([0-9a-f]{32})", page).group(1), "ch5_rope_pairs")
    alt = html.escape(
        f"Animation: a query arrow (blue) and a key arrow {gap} positions earlier (orange) on two unit circles, "
        f"a fast pair turning {float(rates[0]):g} rad per position and a slow pair turning {float(rates[1]):g} rad; "
        "both arrows spin as the positions advance, but the angle between them and the printed score stay the same."
    )
    img = '<img id="_anim_imgch5_rope_pairs"'
    return page.replace(img, f'<img alt="{alt}" aria-label="{alt}"' + img[4:])


def rope_decay(score: np.ndarray, band: np.ndarray, head_dim: int, bound: np.ndarray | None = None):
    """Cell "RoPE score against distance": ``score`` ``(n,)`` of q = k against distance, ``band`` ``(2, n)`` the 5th
    and 95th percentiles of independent random pairs, both divided by the head width d; the trivial bound
    |q| |k| / d = 1 (Cauchy-Schwarz, for any q, k of the q = k curve's norm) is drawn dashed. ``bound`` ``(n,)``,
    if given, is RoFormer's bound over |q| |k| for a q = k whose pair magnitudes fall smoothly, drawn dash-dotted."""
    span = len(score)
    fig, ax = plt.subplots(figsize=(7, 2.8))
    ax.fill_between(range(span), band[0], band[1], color="0.85", label="independent random q, k (5-95%)")
    ax.plot(score, lw=0.8, label="q = k = (1, ..., 1)")
    ax.axhline(1, color="0.3", lw=0.8, ls="--", label="|q| |k| / d, the bound for any q, k of this norm")
    if bound is not None:
        ax.plot(bound, lw=1, ls="-.", color="C3", label="RoFormer's bound / |q| |k|, smooth q = k")
    ax.axhline(0, color="0.6", lw=0.8)
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlim(0, span)
    ax.set_xlabel("distance m - n (tokens; linear below 10, logarithmic above)")
    ax.set_ylabel("score / d")
    ax.set_title(f"RoPE score against distance (head_dim {head_dim}, base 10000)", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig


def rope_bounds(curves: Mapping[str, np.ndarray], head_dim: int):
    """Cell "RoFormer's bound": ``name -> (n,)`` the bound divided by the trivial bound |q| |k| against distance,
    on a log axis; 1 (the trivial bound itself) is drawn dashed, so a curve above it says nothing."""
    fig, ax = plt.subplots(figsize=(7, 2.8))
    for name, curve in curves.items():
        ax.plot(curve, lw=1, label=name)
    ax.axhline(1, color="0.3", lw=0.8, ls="--", label="trivial bound |q| |k|")
    ax.set_xscale("symlog", linthresh=10)
    ax.set_yscale("log")
    ax.set_xlim(0, max(len(curve) for curve in curves.values()))
    ax.set_xlabel("distance m - n (tokens; linear below 10, logarithmic above)")
    ax.set_ylabel("bound / (|q| |k|)")
    ax.set_title(f"RoFormer's bound over the trivial bound (head_dim {head_dim}, base 10000)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def alibi(slopes: np.ndarray, bias: np.ndarray, head: int = 1):
    """ALiBi's full bias ``(h, s, s)``: the last query's row for every head, and one head as a causal heat map."""
    h, s = bias.shape[0], bias.shape[-1]
    fig, axes = plt.subplots(1, 2, figsize=(9, 4.2), gridspec_kw={"width_ratios": [1.4, 1]})
    for i in range(h):
        axes[0].plot(range(s), bias[i, -1], lw=1.2, label=f"head {i}: slope 1/{1 / slopes[i]:g}")
    axes[0].set_xlabel(f"key position n (query at m = {s - 1})")
    axes[0].set_ylabel("bias added to the score")
    # below the axes, so that no line is hidden
    axes[0].legend(fontsize=8, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    axes[0].set_title("ALiBi's penalty grows linearly with distance", fontsize=10)
    causal = np.where(np.triu(np.ones((s, s), dtype=bool), 1), np.nan, bias[head])
    image = axes[1].imshow(causal, cmap="viridis")
    axes[1].set_title(f"head {head}, causal: keys n <= m only", fontsize=10)
    axes[1].set_xlabel("key n")
    axes[1].set_ylabel("query m")
    fig.colorbar(image, ax=axes[1], fraction=0.046, label="bias -a (m - n)")
    fig.tight_layout()
    return fig


def t5_buckets(distance: np.ndarray, curves: Mapping[str, np.ndarray], num_buckets: int, max_distance: int):
    """Bucket against distance, one step curve per ``label -> buckets``."""
    fig, ax = plt.subplots(figsize=(9.5, 2.8))
    for label, buckets in curves.items():
        ax.step(distance, buckets, where="post", label=label)
    ax.axvline(max_distance, color="0.6", ls=":", lw=1)
    ax.text(max_distance + 3, 5, f"max_distance = {max_distance}", fontsize=8, color="0.4")
    ax.set_xlabel("distance |m - n| between query m and key n (tokens)")
    ax.set_ylabel("bucket")
    ax.set_title(f"T5 buckets (num_buckets = {num_buckets}): exact, then logarithmic, then one for all", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def frequency_ratios(
    ratios: Mapping[str, np.ndarray], turns: np.ndarray, title: str, styles=None, betas: Sequence[float] = (32, 1)
):
    """New over old frequency per pair for every ``name -> ratio (p,)``, with dotted lines where the pairs cross each
    of ``betas`` turns over the training length (``turns`` ``(p,)``, fastest pair first)."""
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    for name, ratio in ratios.items():
        ax.plot(ratio, label=name, **(styles or {}).get(name, {}))
    for beta in betas:
        index = int((turns > beta).sum())
        ax.axvline(index - 0.5, color="0.7", ls=":", lw=1)
        label = f"{beta} turn{'s' if beta > 1 else ''}\nover L"
        ax.text(index, 0.5, label, fontsize=7, color="0.4", transform=ax.get_xaxis_transform())
    _ratio_axis(ax, ratios.values())
    ax.set_xlabel("pair i (fast to slow)")
    ax.set_ylabel("new frequency / old")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def _ratio_axis(ax, ratios) -> None:
    """A log y axis with ticks at 1, 1/2, 1/4, ... down to the smallest ratio drawn (the divisor s)."""
    floor = min(float(np.min(r)) for r in ratios)
    ticks = [2.0**-k for k in range(int(np.ceil(-np.log2(floor) - 1e-9)) + 1)]
    ax.set_yscale("log")
    ax.set_yticks(ticks, ["1"] + [f"1/{2**k}" for k in range(1, len(ticks))])
    ax.minorticks_off()
    ax.set_ylim(ticks[-1] / 1.15, 1.15)


def config_ratios(curves: Mapping[str, tuple[np.ndarray, np.ndarray]]):
    """Published configs: ``name -> (ratio (p,), turns over the original length (p,))``, drawn against the pair
    index (as a fraction of the pairs) and against the turns."""
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.2), sharey=True)
    for name, (ratio, turns) in curves.items():
        axes[0].plot(np.arange(len(ratio)) / len(ratio), ratio, label=name)
        axes[1].plot(turns, ratio, label=name)
    axes[0].set_xlabel("pair i / (d/2)  (fast to slow)")
    axes[0].set_ylabel("new frequency / old")
    _ratio_axis(axes[0], [ratio for ratio, _ in curves.values()])
    axes[1].set_xscale("log")
    axes[1].invert_xaxis()
    axes[1].axvline(1, color="0.7", ls=":", lw=1)
    axes[1].set_xlabel("turns over the original length (log, fast to slow)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def angle_coverage(coverage: Mapping[float, tuple[np.ndarray, np.ndarray]], head_dim: int, factor: int):
    """Per base, ``(seen, test)`` ``(p,)``: the largest angle in turns each pair reaches in training and at
    ``factor`` times the training length (:func:`~course_embed.lab.diagnostics.angle_coverage`)."""
    fig, ax = plt.subplots(figsize=(7.5, 3))
    palette = ("tab:green", "tab:orange", "tab:red", "tab:purple", "tab:brown")[: len(coverage)]
    for (base, (seen, test)), color in zip(coverage.items(), palette, strict=True):
        ax.plot(seen, "o-", color=color, ms=3, label=f"base {base:g}: in training (L - 1)")
        ax.plot(test, "o--", color=color, ms=3, alpha=0.6, label=f"base {base:g}: at {factor}L")
    ax.axhline(1, color="0.5", lw=0.8, ls=":")
    ax.set_yscale("log")
    ax.set_xlabel(f"pair i of a {head_dim}-wide head (fast to slow)")
    ax.set_ylabel("largest angle, in turns")
    ax.set_title("Angles RoPE's pairs reach in training and at the longest test", fontsize=10)
    ax.legend(fontsize=7, ncol=3, loc="lower left")
    fig.tight_layout()
    return fig
