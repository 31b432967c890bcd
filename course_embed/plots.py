"""Matplotlib figures the chapters show. Each function returns the ``Figure`` and never calls ``plt.show()``.

The numbers a figure shows come from :mod:`course_embed.analysis`, where they are tested.
"""

from __future__ import annotations

import math
import re

import matplotlib.pyplot as plt
import torch
from matplotlib import animation, patches

from . import analysis
from .sinusoidal import sinusoidal_table

# --- chapter 2: the sqrt(d) scaling ----------------------------------------------------------------------------


def _check_series(name: str, values, positive: bool = False) -> list[float]:
    values = [float(v) for v in values]
    if not values:
        raise ValueError(f"{name} is empty; pass at least one value to plot")
    if positive and min(values) <= 0:
        raise ValueError(f"{name} must be positive for a log axis, got {min(values)}")
    return values


def plot_row_norms(norms: dict[str, tuple[float, float]], position_norm: float, d_model: int):
    """Bars of token row norms per init, without and with ``x sqrt(d)``, against the position norm ``sqrt(d/2)``.

    Args:
        norms: ``{init: (norm without the multiplier, norm with it)}``, e.g. RMS row norms from
            :func:`~course_embed.analysis.output_row_norms`.
        position_norm: the sinusoidal row norm, :func:`~course_embed.analysis.sinusoidal_norm`.
        d_model: the width, for the labels.
    """
    if not norms:
        raise ValueError("norms is empty; pass {init: (unscaled, scaled)} for at least one init")
    for init, pair in norms.items():
        if len(pair) != 2:
            raise ValueError(f"norms[{init!r}] must be a pair (unscaled, scaled), got {pair!r}")
        _check_series(f"norms[{init!r}]", pair, positive=True)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = list(norms)
    width = 0.38
    for k, (label, color) in enumerate(((r"table as initialised", "tab:gray"), (r"$\times\sqrt{d}$", "tab:blue"))):
        xs = [i + (k - 0.5) * width for i in range(len(names))]
        heights = [norms[n][k] for n in names]
        ax.bar(xs, heights, width, color=color, label=label)
        for x, h in zip(xs, heights):
            ax.text(x, h, f"{h:.3g}", ha="center", va="bottom", fontsize=8)
    ax.axhline(position_norm, color="black", linestyle="--",
               label=rf"sinusoidal position, $\sqrt{{d/2}}$ = {position_norm:.3g}")
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel(f"RMS row norm (d = {d_model})")
    ax.set_title(r"The same $\times\sqrt{d}$ puts each init somewhere else")
    ax.legend(fontsize=8, loc="upper right")
    ax.margins(y=0.25)
    fig.tight_layout()
    return fig


def plot_norm_ratio(d_models: list[int], ratios: dict[str, list[float]]):
    """Token norm over position norm against the width ``d``, one line per init (log-log).

    Args:
        d_models: the widths ``d`` (x axis).
        ratios: ``{label: ratio at each d}``, e.g. :func:`~course_embed.analysis.token_to_position_ratio`.
    """
    widths = _check_series("d_models", d_models, positive=True)
    if not ratios:
        raise ValueError("ratios is empty; pass {label: [ratio at each d]} for at least one line")
    fig, ax = plt.subplots(figsize=(8, 3.2))
    styles = [("-", "o", 7), ("--", "s", 6), (":", "^", 9), ("-.", "x", 7)]  # distinct, so equal lines stay visible
    for k, (label, values) in enumerate(ratios.items()):
        values = _check_series(f"ratios[{label!r}]", values, positive=True)
        if len(values) != len(widths):
            raise ValueError(f"ratios[{label!r}] has {len(values)} values for {len(widths)} widths in d_models")
        linestyle, marker, size = styles[k % len(styles)]
        ax.plot(widths, values, linestyle=linestyle, marker=marker, markersize=size, label=label)
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1, label="equal norms")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(widths, [str(int(w)) for w in widths])
    ax.set_xlabel("d_model")
    ax.set_ylabel("token norm / position norm")
    ax.set_title(r"With N(0, 1), $\times\sqrt{d}$ buries the position deeper as $d$ grows")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def plot_probe_accuracy(labels: list[str], accuracies: list[float], chance: float):
    """Horizontal bars of position-probe accuracy, one per ``(init, scale)`` setting, with the chance level.

    Args:
        labels: one label per setting.
        accuracies: test accuracies in ``[0, 1]`` (:func:`~course_embed.analysis.position_probe`).
        chance: accuracy of a random guess, ``1 / s``.
    """
    accuracies = _check_series("accuracies", accuracies)
    if len(labels) != len(accuracies):
        raise ValueError(f"labels has {len(labels)} entries but accuracies has {len(accuracies)}; pass one each")
    if not all(0 <= a <= 1 for a in accuracies + [chance]):
        raise ValueError("accuracies and chance must lie in [0, 1]")
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(labels) + 1.2))
    colors = ["tab:red" if a < 5 * chance else "tab:blue" for a in accuracies]
    ax.barh(range(len(labels)), accuracies, color=colors)
    for i, a in enumerate(accuracies):
        ax.text(a + 0.01, i, f"{a:.1%}", va="center", fontsize=8)
    ax.axvline(chance, color="black", linestyle="--", linewidth=1, label=f"chance, {chance:.1%}")
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.12)
    ax.set_xlabel(f"test accuracy of the position probe (dashed line: chance, {chance:.1%})")
    ax.set_title("Can a linear probe read the position from token + position?")
    fig.tight_layout()
    return fig


# --- chapter 3: sinusoidal mathematics -------------------------------------------------------------------------


def _heatmap(ax, table: torch.Tensor, d_model: int, base: float):
    """Draw a ``(s, d_shown)`` slice of a sinusoidal table: positions down, dimensions across, wavelengths on top."""
    shown = table.shape[1]
    image = ax.imshow(table.detach().cpu().float().numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1,
                      interpolation="nearest")
    ax.set_xlabel("dimension index (0 = fastest)")
    ax.set_ylabel("position")
    ticks = sorted({2 * round(f * (shown - 2) / 2) for f in (0, 0.25, 0.5, 0.75, 1)})
    lengths = analysis.wavelengths(d_model, base)
    top = ax.secondary_xaxis("top")
    top.set_xticks(ticks, labels=[f"{w:.3g}" if w < 1000 else f"{w:,.0f}" for w in lengths[ticks].tolist()])
    top.set_xlabel("wavelength in positions (short = fast)", fontsize=9)
    return image


def plot_heatmap(length: int = 100, d_model: int = 512, dims: int = 128, base: float = 10000.0):
    """Heatmap of the first ``dims`` dimensions of a ``(length, d_model)`` sinusoidal table, labelled correctly.

    Low dimension indices (left) are the fast, short-wavelength ones; wavelengths grow to the right.
    """
    if not 2 <= dims <= d_model:
        raise ValueError(f"dims must lie in [2, d_model={d_model}], got {dims}")
    table = sinusoidal_table(length, d_model, base)[:, :dims]  # (s, dims)
    fig, ax = plt.subplots(figsize=(8, 4))
    image = _heatmap(ax, table, d_model, base)
    fig.colorbar(image, ax=ax, label="PE value")
    ax.set_title(f"d_model = {d_model}, first {dims} dimensions: left changes fast, right slowly", fontsize=10)
    fig.tight_layout()
    return fig


def explorer_dims(d_model: int) -> list[int]:
    """The sine columns the explorer draws as curves: ``0, d/8, d/4, d/2`` (rounded down to even)."""
    return sorted({2 * (d_model // (2 * f)) if f else 0 for f in (0, 8, 4, 2)})


def plot_explorer(d_model: int = 128, base: float = 10000.0, positions: int = 100):
    """Two panels for a ``(positions, d_model)`` sinusoidal table: the heatmap, and a few columns as curves.

    The curves are the sine columns :func:`explorer_dims`; the widget in :mod:`course_embed.widgets` redraws
    this figure when its sliders move.
    """
    if positions < 2:
        raise ValueError(f"positions must be >= 2, got {positions}")
    table = sinusoidal_table(positions, d_model, base)  # (s, d)
    lengths = analysis.wavelengths(d_model, base)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [3, 2]})
    image = _heatmap(left, table, d_model, base)
    fig.colorbar(image, ax=left, label="PE value")
    for j in explorer_dims(d_model):
        right.plot(range(positions), table[:, j].numpy(), label=f"dim {j} (wavelength {lengths[j].item():.3g})")
    right.set_xlabel("position")
    right.set_ylabel("PE value")
    right.set_ylim(-1.1, 1.6)
    right.legend(fontsize=7, loc="upper right")
    fig.suptitle(f"sinusoidal encoding: d_model = {d_model}, base = {base:g}, {positions} positions", fontsize=10)
    fig.tight_layout()
    return fig


def plot_dot_by_offset(max_offset: int = 5000, d_models: tuple[int, ...] = (512, 64), base: float = 10000.0):
    """``PE[p] . PE[p + k] / (d/2)`` against the offset ``k`` (log axis), with each curve's first rise marked."""
    fig, ax = plt.subplots(figsize=(8, 3.2))
    offsets = torch.arange(1, max_offset + 1)
    for d in d_models:
        dots = analysis.dot_by_offset(max_offset, d, base) / (d / 2)  # (max_offset + 1,), 1 at k = 0
        line, = ax.plot(offsets.numpy(), dots[1:].numpy(), lw=1, label=f"d_model = {d}")
        rise = analysis.first_rise(d, base, max_offset)
        if rise is not None:
            ax.plot([rise], [dots[rise].item()], "o", color=line.get_color(), ms=6)
            ax.annotate(f"first rise at k = {rise}", (rise, dots[rise].item()), textcoords="offset points",
                        xytext=(8, 8), fontsize=8, color=line.get_color())
    ax.set_xscale("log")
    ax.set_xlabel("offset k = |p - q| (positions)")
    ax.set_ylabel("PE[p] . PE[q] / (d/2)")
    ax.set_title("The dot product depends only on the offset, and does not fall monotonically", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_unseen_angles(train_len: int = 512, test_len: int = 2048, d_model: int = 512, base: float = 10000.0):
    """Per sin/cos pair, how far positions past ``train_len`` go from every angle seen in training (radians)."""
    gaps = analysis.unseen_angle_gap(train_len, test_len, d_model, base)  # (d/2,)
    turned = int((analysis.wavelengths(d_model, base)[::2] <= train_len).sum())  # pairs that completed a turn
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.plot(range(len(gaps)), gaps.numpy(), color="tab:red", lw=1.2)
    ax.axvline(turned - 0.5, color="gray", ls="--", lw=1)
    ax.text(turned, 0.92 * math.pi, f"  pairs {turned}+ never completed a turn in {train_len} positions",
            fontsize=8, va="top")
    ax.set_ylim(0, math.pi)
    ax.set_xlabel("pair index i (dimensions 2i, 2i + 1; 0 = fastest)")
    ax.set_ylabel("largest angle gap (rad)")
    ax.set_title(f"positions {train_len}-{test_len - 1} put slow pairs at angles never seen in positions "
                 f"0-{train_len - 1}", fontsize=10)
    fig.tight_layout()
    return fig


def pair_circles(d_model: int = 64, pairs: tuple[int, ...] = (0, 4, 8, 16), base: float = 10000.0):
    """One unit disc per sin/cos pair, with a hand pointing at ``(x, y) = (PE[p, 2i], PE[p, 2i + 1])``.

    Returns ``(fig, update)``; ``update(p)`` moves every hand to position ``p`` and returns the hands (``Line2D``,
    data ``([0, sin], [0, cos])``).
    """
    half = d_model // 2
    if not pairs or any(not 0 <= i < half for i in pairs):
        raise ValueError(f"pairs must be indices in [0, d_model/2 = {half}), got {pairs}")
    lengths = analysis.wavelengths(d_model, base)
    fig, axes = plt.subplots(1, len(pairs), figsize=(1.5 * len(pairs), 1.9), dpi=72)
    axes = [axes] if len(pairs) == 1 else list(axes)
    hands = []
    for ax, i in zip(axes, pairs):
        # a flat disc without antialiasing keeps every PNG frame small
        ax.add_patch(patches.Circle((0, 0), 1, facecolor="#e8eef6", edgecolor="none", antialiased=False))
        hand, = ax.plot([0, 0], [0, 1], "-o", color="tab:blue", markevery=[1])
        hands.append(hand)
        ax.set_aspect("equal")
        ax.set_xlim(-1.2, 1.2)
        ax.set_ylim(-1.2, 1.2)
        ax.axis("off")
        ax.set_title(f"x: dim {2 * i}, y: dim {2 * i + 1}\nwavelength {lengths[2 * i].item():.3g}", fontsize=8)
    title = fig.suptitle("position 0", fontsize=9)
    fig.tight_layout()

    def update(p: int):
        row = sinusoidal_table(1, d_model, base, offset=p)[0]  # (d,)
        for hand, i in zip(hands, pairs):
            hand.set_data([0, row[2 * i].item()], [0, row[2 * i + 1].item()])
        title.set_text(f"position {p}")
        return hands

    return fig, update


def animate_pairs(d_model: int = 64, pairs: tuple[int, ...] = (0, 4, 8, 16), positions: int = 40,
                  base: float = 10000.0, name: str = "pairs", interval: int = 400) -> str:
    """An HTML animation (``to_jshtml``: PNG frames and inline JavaScript) of :func:`pair_circles` for positions
    ``0 .. positions - 1``, one frame each; it plays on a static page, without a kernel.

    ``to_jshtml`` names its elements with a random id; it is replaced by ``name`` (a JavaScript identifier) so
    that re-running a notebook stores the same HTML. The figure is closed, so a notebook shows it only once.
    """
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"name must be a JavaScript identifier (letters, digits, _), got {name!r}")
    if positions < 1:
        raise ValueError(f"positions must be >= 1 (one frame per position), got {positions}")
    fig, update = pair_circles(d_model, pairs, base)
    html = animation.FuncAnimation(fig, update, frames=positions, interval=interval).to_jshtml(default_mode="loop")
    plt.close(fig)
    random_id = re.search(r"_anim_img([0-9a-f]{32})", html).group(1)
    return html.replace(random_id, name)


# --- chapter 4: fusion ------------------------------------------------------------------------------------------


def _series(name: str, values, length: int | None = None, positive: bool = False) -> list[float]:
    values = [float(v) for v in values]
    if not values or (length is not None and len(values) != length):
        raise ValueError(f"{name} must hold {length or 'at least one'} values, got {len(values)}")
    if positive and min(values) <= 0:
        raise ValueError(f"{name} must be positive for a log axis, got {min(values)}")
    return values


def plot_fusion_probe(d_models: list[int], accuracies: dict[str, list[float]], chance: float):
    """Probe accuracy against the width ``d`` (log axis), one line per label, with the chance level dotted.

    Args:
        d_models: the widths measured.
        accuracies: ``{label: one accuracy per width}``, e.g. from :func:`~course_embed.analysis.fusion_probe`.
        chance: accuracy of a uniform guess, ``1 / classes``.
    """
    d_models = _series("d_models", d_models, positive=True)
    if not accuracies:
        raise ValueError("accuracies is empty; pass {label: [one accuracy per d_model]}")
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for label, values in accuracies.items():
        ax.plot(d_models, _series(f"accuracies[{label!r}]", values, len(d_models)), marker="o", label=label)
    ax.axhline(chance, color="gray", linestyle=":", label="chance")
    ax.set_xscale("log", base=2)
    ax.set_xticks(d_models, [str(int(d)) for d in d_models])
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("model width d")
    ax.set_ylabel("held-out accuracy")
    ax.set_title("Recovering the position from the fused vector with a linear probe")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def plot_dropout_average(n_samples: list[int], measured: list[float], predicted: list[float]):
    """Relative error of the average of ``n`` dropout samples against the eval output (log-log), with theory.

    ``measured`` from :func:`~course_embed.analysis.dropout_statistics`, ``predicted`` from
    :func:`~course_embed.analysis.binomial_mean_abs_error`; both fall as ``1 / sqrt(n)``.
    """
    n_samples = _series("n_samples", n_samples, positive=True)
    measured = _series("measured", measured, len(n_samples), positive=True)
    predicted = _series("predicted", predicted, len(n_samples), positive=True)
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(n_samples, predicted, color="black", linestyle="--", label="exact expectation (binomial)")
    ax.plot(n_samples, measured, "o", color="tab:red", label="measured")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("dropout masks averaged, n")
    ax.set_ylabel("mean |average - eval| / mean |eval|")
    ax.set_title("The average over masks converges to the eval output")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# --- chapter 6: optimisation ------------------------------------------------------------------------------------


def bench_bars(tables, *, metric: str = "of_copy"):
    """Grouped bars, one group per :class:`~course_embed.bench.BenchTable`, one bar per variant (copy excluded).

    ``metric`` is ``"of_copy"`` (copy time / variant time: 100% is the speed of a same-size copy) or ``"speedup"``
    (over each table's baseline). Bars are labelled with their value.
    """
    if metric not in ("of_copy", "speedup"):
        raise ValueError(f"metric must be 'of_copy' or 'speedup', got {metric!r}")
    names = [r.name for r in tables[0].rows if r.name != "copy"]
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        values = [(t.of_copy(name) * 100 if metric == "of_copy" else t.speedup(name)) for t in tables]
        xs = [i + (k - (len(names) - 1) / 2) * width for i in range(len(tables))]
        bars = ax.bar(xs, values, width, label=name)
        ax.bar_label(bars, fmt="%.0f%%" if metric == "of_copy" else "%.1fx", fontsize=7)
    if metric == "of_copy":
        ax.axhline(100, color="k", lw=0.8, ls="--")
        ax.set_ylabel("speed, % of a same-size copy")
    else:
        ax.axhline(1, color="k", lw=0.8, ls="--")
        ax.set_ylabel(f"speedup over {tables[0].baseline}")
    ax.set_xticks(range(len(tables)), [t.title for t in tables], fontsize=8)
    ax.legend(fontsize=8, ncol=len(names), loc="upper left")
    ax.margins(y=0.15)
    fig.tight_layout()
    return fig


def memory_per_rank_plot(vocab_sizes, d_model: int, world_sizes, *, itemsize: int = 4, optimizer: str = "adam"):
    """Embedding memory per rank (weight + gradient + optimizer state, GiB) against the vocabulary size, one line
    per world size, from :func:`course_embed.parallel.memory_per_rank`."""
    from .parallel import memory_per_rank

    fig, ax = plt.subplots(figsize=(6, 3.4))
    for r in world_sizes:
        gib = [memory_per_rank(v, d_model, r, itemsize, optimizer)["total"] / 2**30 for v in vocab_sizes]
        ax.plot(vocab_sizes, gib, marker="o", ms=3, label=f"{r} rank{'s' if r > 1 else ''}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("vocabulary size")
    ax.set_ylabel("GiB per rank")
    ax.set_title(f"Embedding table, d = {d_model}, float{8 * itemsize} + {optimizer} state", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    return fig
