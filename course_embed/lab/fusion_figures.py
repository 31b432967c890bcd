"""Chapter 4's figures: probe accuracy by width, dropout's average, cosine histograms, grouped bars, pad influence,
per-seed dots.

Each function returns the ``Figure`` and never shows it; the numbers come from :mod:`course_embed.lab.fusion`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch

from .fusion import expected_abs_cosine
from .series import as_series


def plot_fusion_probe(d_models: list[int], accuracies: dict[str, list[float]], chance: float):
    """Probe accuracy against the width ``d`` (log axis), one line per label, with the chance level dotted.

    Args:
        d_models: the widths measured.
        accuracies: ``{label: one accuracy per width}``, e.g. from :func:`~course_embed.lab.fusion.fusion_probe`.
        chance: accuracy of a uniform guess, ``1 / classes``.
    """
    d_models = as_series("d_models", d_models, positive=True)
    if not accuracies:
        raise ValueError("accuracies is empty; pass {label: [one accuracy per d_model]}")
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for label, values in accuracies.items():
        ax.plot(d_models, as_series(f"accuracies[{label!r}]", values, len(d_models)), marker="o", label=label)
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

    ``measured`` from :func:`~course_embed.lab.fusion.dropout_statistics`, ``predicted`` from
    :func:`~course_embed.lab.fusion.binomial_mean_abs_error`; both fall as ``1 / sqrt(n)``.
    """
    n_samples = as_series("n_samples", n_samples, positive=True)
    measured = as_series("measured", measured, len(n_samples), positive=True)
    predicted = as_series("predicted", predicted, len(n_samples), positive=True)
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


def plot_cosine_histograms(cosines: dict[int, torch.Tensor]):
    """Histograms of ``cos(token, position)`` per width ``d`` (``{d: (n,) cosines}``), with the closed-form
    ``E|cos|`` (:func:`expected_abs_cosine`) marked at ``+-`` on each."""
    if not cosines:
        raise ValueError("cosines is empty; pass {d_model: (n,) tensor of cosines}")
    fig, ax = plt.subplots(figsize=(8, 3.2))
    bins = torch.linspace(-1, 1, 81).numpy()
    for d, values in cosines.items():
        line = ax.hist(
            values.detach().double().cpu().numpy(),
            bins=bins,
            density=True,
            histtype="step",
            lw=1.4,
            label=f"d = {d}: E|cos| = {expected_abs_cosine(d):.3f}",
        )[2][0]
        for sign in (-1, 1):
            ax.axvline(sign * expected_abs_cosine(d), color=line.get_edgecolor(), ls=":", lw=1)
    ax.set_xlabel("cos(token vector, position vector)")
    ax.set_ylabel("density")
    ax.set_title("Random directions are nearly orthogonal in high dimension (dotted: +-E|cos|)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_bars(groups: dict[str, dict[str, float]], ylabel: str, title: str, log: bool = False):
    """Grouped bars: ``{group: {bar label: value}}``, every group with the same bar labels."""
    if not groups:
        raise ValueError("groups is empty; pass {group: {bar label: value}}")
    labels = list(next(iter(groups.values())))
    if any(list(g) != labels for g in groups.values()):
        raise ValueError(f"every group must have the bar labels {labels}")
    width = 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for j, label in enumerate(labels):
        x = [i + (j - (len(labels) - 1) / 2) * width for i in range(len(groups))]
        bars = ax.bar(x, [g[label] for g in groups.values()], width, label=label)
        ax.bar_label(bars, fmt="%.2f" if not log else "%.3g", fontsize=7)
    ax.set_xticks(range(len(groups)), list(groups))
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def plot_pad_influence(n_pads: list[int], unmasked: list[float], masked: list[float]):
    """How far trailing pads move the real tokens' attention outputs, without and with a key padding mask."""
    n_pads = as_series("n_pads", n_pads, positive=True)
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.plot(n_pads, as_series("unmasked", unmasked, len(n_pads)), "o-", label="no mask")
    ax.plot(n_pads, as_series("masked", masked, len(n_pads)), "s-", label="key_padding_mask")
    ax.set_xscale("log", base=2)
    ax.set_xticks(n_pads, [str(int(n)) for n in n_pads])
    ax.set_xlabel("pad tokens appended")
    ax.set_ylabel("max |change| of real outputs")
    ax.set_title("Pads move the real tokens' outputs unless the attention masks them", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_seed_dots(values: dict[str, torch.Tensor], xlabel: str, title: str):
    """One row per group: a dot per seed (``values[label]``, shape ``(seeds,)``), the mean with a bar of two
    standard errors each side, and the median as a vertical tick."""
    if not values:
        raise ValueError("values is empty; pass {label: one value per seed}")
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.32 * len(values)))
    for row, (label, v) in enumerate(values.items()):
        v = torch.as_tensor(v, dtype=torch.float64).flatten()
        if len(v) < 2:
            raise ValueError(f"values[{label!r}] needs at least two seeds, got {len(v)}")
        jitter = torch.linspace(-0.18, 0.18, len(v))
        ax.plot(v.numpy(), (row + jitter).numpy(), "o", ms=3, alpha=0.5, color="tab:blue")
        se = v.std().item() / len(v) ** 0.5
        ax.errorbar(v.mean().item(), row, xerr=2 * se, fmt="D", color="black", ms=5, capsize=3)
        ax.plot([v.median().item()] * 2, [row - 0.3, row + 0.3], color="tab:red", lw=2)
    ax.plot([], [], "D", color="black", label="mean ± 2 SE")
    ax.plot([], [], color="tab:red", lw=2, label="median")
    ax.set_yticks(range(len(values)), list(values))
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig
