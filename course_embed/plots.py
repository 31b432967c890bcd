"""Matplotlib figures the chapters show. Each function returns the ``Figure`` and never calls ``plt.show()``.

The numbers a figure shows come from :mod:`course_embed.analysis`, where they are tested.
"""

from __future__ import annotations

import matplotlib.pyplot as plt  # noqa: F401  (used by the chapter sections below)

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
    ax.set_title(r"Only the small inits land near the position norm after $\times\sqrt{d}$")
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
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for label, values in ratios.items():
        values = _check_series(f"ratios[{label!r}]", values, positive=True)
        if len(values) != len(widths):
            raise ValueError(f"ratios[{label!r}] has {len(values)} values for {len(widths)} widths in d_models")
        ax.plot(widths, values, marker="o", label=label)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="equal norms")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(widths, [str(int(w)) for w in widths])
    ax.set_xlabel("d_model")
    ax.set_ylabel("token norm / position norm")
    ax.set_title(r"With N(0, 1), $\times\sqrt{d}$ buries the position deeper as $d$ grows")
    ax.legend(fontsize=8)
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
    ax.set_xlabel("test accuracy of the position probe")
    ax.set_title("Can a linear probe read the position from token + position?")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


# --- chapter 3: sinusoidal mathematics -------------------------------------------------------------------------


# --- chapter 4: fusion ------------------------------------------------------------------------------------------
