"""Chapter 2, the sqrt(d) scaling: norms, tied logits, reading position and token back, bfloat16 rounding, figures.

Shapes: ``v`` vocabulary size, ``d`` model width, ``s`` positions, ``n`` vectors (leading dims flattened).
Figures are returned as ``Figure`` objects and never shown here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch

from .probe import nearest_mean_predict
from .series import as_series
from .token_embedding import init_std, row_norms


def expected_token_norm(init: str, vocab_size: int, d_model: int, scale: bool) -> float:
    """Root-mean-square row norm ``sqrt(E ||x||^2)`` of the token vectors of a fresh ``(v, d)`` table.

    A row of ``d`` independent entries of std ``sigma`` (:func:`init_std`) has ``E ||w||^2 = d sigma^2``, so the
    RMS norm is ``sigma * sqrt(d)`` exactly, and ``sigma * d`` after the ``sqrt(d)`` multiplier.
    """
    norm = init_std(init, vocab_size, d_model) * math.sqrt(d_model)
    return norm * math.sqrt(d_model) if scale else norm


def sinusoidal_norm(d_model: int) -> float:
    """Norm of every sinusoidal position vector: ``sqrt(d / 2)`` (each of the ``d/2`` sin/cos pairs has norm 1)."""
    if d_model < 2 or d_model % 2:
        raise ValueError(f"d_model must be a positive even number (sin/cos come in pairs), got {d_model}")
    return math.sqrt(d_model / 2)


def token_to_position_ratio(init: str, vocab_size: int, d_model: int, scale: bool) -> float:
    """Expected token norm over position norm. ``sqrt(2 d)`` for N(0, 1) with the multiplier (32 at d = 512)."""
    return expected_token_norm(init, vocab_size, d_model, scale) / sinusoidal_norm(d_model)


def output_row_norms(embedding) -> torch.Tensor:
    """Norms of the vectors an embedding outputs, one per token id: ``(v,)`` float64.

    ``embedding`` is a :class:`~course_embed.token.TokenEmbedding` (its ``weight`` ``(v, d)`` times its
    ``multiplier``) or an ``nn.Embedding`` (multiplier 1).
    """
    return row_norms(embedding.weight) * getattr(embedding, "multiplier", 1.0)


def rms(x: torch.Tensor) -> float:
    """Root mean square of all entries of ``x`` (any shape), computed in float64."""
    if x.numel() == 0:
        raise ValueError("rms of an empty tensor is undefined; pass at least one value")
    return x.detach().double().pow(2).mean().sqrt().item()


def tied_logit_std(init: str, vocab_size: int, d_model: int) -> float:
    """Closed-form std of the logits ``h @ W.T`` of a freshly initialised ``(v, d)`` table ``W``, for unit-RMS ``h``.

    Each logit is a sum of ``d`` products with ``E[(h . w)^2] = sigma^2 ||h||^2 = sigma^2 d``, so the std is
    ``sigma * sqrt(d)``: 1 for N(0, d**-0.5), ``sqrt(d)`` for N(0, 1). The same number is the RMS of the
    table's entries after the ``sqrt(d)`` multiplier: one scale serves both ends of a tied model.
    """
    return init_std(init, vocab_size, d_model) * math.sqrt(d_model)


@dataclass(frozen=True)
class LogitStats:
    """What a tied output layer predicts at initialisation.

    ``std``: std of the logits; ``loss``: mean cross-entropy on the targets (a uniform guess costs ``log v``);
    ``top_probability``: mean probability of the most likely token (``1 / v`` for a uniform guess).
    """

    std: float
    loss: float
    top_probability: float


def logit_stats(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> LogitStats:
    """Logits ``hidden @ weight.T`` and what they predict, computed in float64.

    Args:
        hidden: final hidden vectors ``(*, d)``, e.g. ``(b, s, d)``.
        weight: the output layer's ``(v, d)`` weight (the token table, when tied).
        targets: token ids ``(*)``, the leading shape of ``hidden``.
    """
    if hidden.shape[-1] != weight.shape[-1]:
        raise ValueError(
            f"hidden has width {hidden.shape[-1]} but weight is {tuple(weight.shape)}; "
            f"hidden must be (..., d) and weight (v, d)"
        )
    if targets.shape != hidden.shape[:-1]:
        raise ValueError(
            f"targets must have shape {tuple(hidden.shape[:-1])} (hidden without its last dimension), "
            f"got {tuple(targets.shape)}"
        )
    logits = hidden.detach().double().reshape(-1, hidden.shape[-1]) @ weight.detach().double().T  # (n, v)
    target_logits = logits.gather(1, targets.reshape(-1, 1).to(logits.device)).squeeze(1)  # (n,)
    loss = (torch.logsumexp(logits, dim=-1) - target_logits).mean()
    top = logits.softmax(dim=-1).amax(dim=-1).mean()
    return LogitStats(logits.std().item(), loss.item(), top.item())


@dataclass(frozen=True)
class ReadBack:
    """What a nearest-mean reader recovers from ``token + position`` vectors, with the chance levels.

    ``position_accuracy`` and ``position_abs_error`` (in positions) read the position; ``token_accuracy`` reads
    the token id. Chance: ``1 / s`` for the position, ``1 / v`` for the token.
    """

    position_accuracy: float
    position_abs_error: float
    token_accuracy: float
    position_chance: float
    token_chance: float


def read_back(tokens: torch.Tensor, positions: torch.Tensor, sequences: int, generator: torch.Generator) -> ReadBack:
    """Read the position and the token back from ``token + position``, with the true class means as centroids.

    Draws ``sequences`` sequences of ``s`` uniformly random ids, forms ``x = tokens[id] + positions[p]`` and
    classifies every vector with :func:`~course_embed.lab.probe.nearest_mean_predict`. The class means are
    known exactly: for position ``p`` it is ``positions[p] + mean(tokens)``, for token ``v`` it is
    ``tokens[v] + mean(positions)`` (ids and positions are uniform). Nothing is fitted, so nothing is
    estimated from noisy samples.

    Args:
        tokens: the vector each id is turned into, ``(v, d)`` (table times multiplier).
        positions: position vectors ``(s, d)``.
        sequences: how many random sequences to read (``sequences * s`` vectors).
        generator: CPU generator that draws the ids.
    """
    if positions.dim() != 2 or tokens.dim() != 2 or tokens.shape[1] != positions.shape[1]:
        raise ValueError(
            f"tokens must be (v, d) and positions (s, d) with the same d, got "
            f"{tuple(tokens.shape)} and {tuple(positions.shape)}"
        )
    if sequences < 1:
        raise ValueError(f"sequences must be a positive integer, got {sequences}")
    t, pe = tokens.detach().double().cpu(), positions.detach().double().cpu()
    (s, d), v = pe.shape, t.shape[0]
    ids = torch.randint(0, v, (sequences, s), generator=generator)
    x = (t[ids] + pe).reshape(-1, d)  # (sequences * s, d)
    where = torch.arange(s).repeat(sequences)
    pos = nearest_mean_predict(x, pe + t.mean(dim=0))
    tok = torch.cat([nearest_mean_predict(chunk, t + pe.mean(dim=0)) for chunk in x.split(1024)])
    return ReadBack(
        position_accuracy=(pos == where).double().mean().item(),
        position_abs_error=(pos - where).abs().double().mean().item(),
        token_accuracy=(tok == ids.flatten()).double().mean().item(),
        position_chance=1 / s,
        token_chance=1 / v,
    )


def _check_float_dtype(dtype: torch.dtype) -> torch.finfo:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype such as torch.bfloat16, got {dtype!r}")
    return torch.finfo(dtype)


def position_rounding_error(tokens: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype) -> float:
    """Relative error of the position signal after ``token + position`` is stored in ``dtype``.

    A model held in ``dtype`` stores the token vectors ``t`` in it, adds the position vectors (cast to ``dtype``)
    and rounds the sum. What is left of the position is ``sum - t``; the result is
    ``||(sum - t) - position|| / ||position||``, computed in float64.

    Args:
        tokens: token vectors ``(*, s, d)``, e.g. ``(b, s, d)``.
        positions: position vectors broadcastable to ``tokens``, e.g. ``(s, d)``.
        dtype: storage dtype (``torch.bfloat16``, ``torch.float16``, ...).
    """
    _check_float_dtype(dtype)
    t = tokens.detach().to(dtype)
    p = positions.detach().to(device=t.device)
    summed = t + p.to(dtype)  # rounded to dtype, as in a half-precision model
    target = p.double().expand_as(summed)
    return ((summed.double() - t.double() - target).norm() / target.norm()).item()


def underflow_fraction(x: torch.Tensor, dtype: torch.dtype) -> float:
    """Fraction of the non-zero entries of ``x`` that become exactly 0 when cast to ``dtype``."""
    _check_float_dtype(dtype)
    nonzero = x.detach() != 0
    if not nonzero.any():
        raise ValueError("x has no non-zero entries, so no entry can underflow; pass the values to check")
    return ((x.detach().to(dtype) == 0) & nonzero).sum().item() / nonzero.sum().item()


def plot_row_norms(norms: dict[str, tuple[float, float]], position_norm: float, d_model: int):
    """Bars of token row norms per init, without and with ``x sqrt(d)``, against the position norm ``sqrt(d/2)``.

    Args:
        norms: ``{init: (norm without the multiplier, norm with it)}``, e.g. RMS row norms from
            :func:`~course_embed.lab.scaling.output_row_norms`.
        position_norm: the sinusoidal row norm, :func:`~course_embed.lab.scaling.sinusoidal_norm`.
        d_model: the width, for the labels.
    """
    if not norms:
        raise ValueError("norms is empty; pass {init: (unscaled, scaled)} for at least one init")
    for init, pair in norms.items():
        if len(pair) != 2:
            raise ValueError(f"norms[{init!r}] must be a pair (unscaled, scaled), got {pair!r}")
        as_series(f"norms[{init!r}]", pair, positive=True)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = list(norms)
    width = 0.38
    for k, (label, color) in enumerate(((r"table as initialised", "tab:gray"), (r"$\times\sqrt{d}$", "tab:blue"))):
        xs = [i + (k - 0.5) * width for i in range(len(names))]
        heights = [norms[n][k] for n in names]
        ax.bar(xs, heights, width, color=color, label=label)
        for x, h in zip(xs, heights, strict=False):
            ax.text(x, h, f"{h:.3g}", ha="center", va="bottom", fontsize=8)
    ax.axhline(
        position_norm,
        color="black",
        linestyle="--",
        label=rf"sinusoidal position, $\sqrt{{d/2}}$ = {position_norm:.3g}",
    )
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
        ratios: ``{label: ratio at each d}``, e.g. :func:`~course_embed.lab.scaling.token_to_position_ratio`.
    """
    widths = as_series("d_models", d_models, positive=True)
    if not ratios:
        raise ValueError("ratios is empty; pass {label: [ratio at each d]} for at least one line")
    fig, ax = plt.subplots(figsize=(8, 3.2))
    styles = [("-", "o", 7), ("--", "s", 6), (":", "^", 9), ("-.", "x", 7)]  # distinct, so equal lines stay visible
    for k, (label, values) in enumerate(ratios.items()):
        values = as_series(f"ratios[{label!r}]", values, positive=True)
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


def plot_read_back(labels: list[str], position: list[float], token: list[float], position_chance: float):
    """Paired horizontal bars: accuracy of reading the position and the token back, one pair per setting.

    Args:
        labels: one label per setting (e.g. ``"N(0, 1) x sqrt(d)"``).
        position, token: accuracies in ``[0, 1]`` (:func:`~course_embed.lab.scaling.read_back`).
        position_chance: accuracy of a random guess of the position, ``1 / s`` (drawn as a line).
    """
    position, token = as_series("position", position), as_series("token", token)
    if not len(labels) == len(position) == len(token):
        raise ValueError(
            f"labels, position and token must have equal lengths, got {len(labels)}, {len(position)}, {len(token)}"
        )
    if not all(0 <= a <= 1 for a in position + token + [position_chance]):
        raise ValueError("accuracies and position_chance must lie in [0, 1]")
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(labels) + 1.3))
    rows = range(len(labels))
    for offset, values, color, name in ((-0.2, position, "tab:blue", "position"), (0.2, token, "tab:orange", "token")):
        ax.barh([r + offset for r in rows], values, height=0.38, color=color, label=f"reads the {name}")
        for r, a in zip(rows, values, strict=False):
            ax.text(a + 0.01, r + offset, f"{a:.1%}", va="center", fontsize=8)
    ax.axvline(
        position_chance, color="black", linestyle="--", linewidth=1, label=f"position chance, {position_chance:.1%}"
    )
    ax.set_yticks(list(rows), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.15)
    ax.set_xlabel("accuracy of the nearest-mean reader on token + position")
    ax.set_title("Reading the position and the token back from their sum, at initialisation")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def plot_sums(sums: dict[str, torch.Tensor]):
    """Heatmaps of ``token + position`` (positions down, dimensions across), one panel per table.

    Args:
        sums: ``{label: (s, d) tensor}``; each panel has its own symmetric colour scale.
    """
    if not sums:
        raise ValueError("sums is empty; pass {label: (s, d) tensor} for at least one panel")
    fig, axes = plt.subplots(1, len(sums), figsize=(3.4 * len(sums), 3.2), squeeze=False)
    for ax, (label, x) in zip(axes[0], sums.items(), strict=False):
        if x.dim() != 2:
            raise ValueError(f"sums[{label!r}] must be (s, d), got {tuple(x.shape)}")
        values = x.detach().double().cpu()
        limit = values.abs().max().item()
        image = ax.imshow(values, cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest")
        fig.colorbar(image, ax=ax, fraction=0.05, label="token + position (own scale)")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("dimension")
    axes[0][0].set_ylabel("position")
    fig.tight_layout()
    return fig


def _draw_curves(ax, curves: dict[str, list[list[float]]], every: int, log_v: float) -> None:
    for k, (label, runs) in enumerate(curves.items()):
        lengths = {len(r) for r in runs}
        if not runs or len(lengths) != 1:
            raise ValueError(f"curves[{label!r}] must hold runs of equal length, got lengths {lengths}")
        values = torch.tensor(runs, dtype=torch.float64)  # (seeds, points)
        steps = [every * i for i in range(values.shape[1])]
        (line,) = ax.plot(  # a colour, a marker and a dash pattern of its own: equal curves stay visible
            steps,
            values.mean(0).tolist(),
            color=f"C{k % 10}",
            marker="osv^DPX*"[k % 8],
            markersize=4,
            label=label,
            linestyle=("-", "--", ":", "-.")[k % 4],
        )
        low, high = values.min(0).values.tolist(), values.max(0).values.tolist()
        ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
    ax.axhline(log_v, color="gray", linestyle="--", linewidth=1, label="uniform guess, log V")
    ax.set_yscale("log")
    ax.set_xlabel("training step")


def plot_training(curves: dict[str, list[list[float]]], every: int, log_v: float):
    """Held-out loss against training steps: one line per setting (mean over seeds), a band from min to max.

    Args:
        curves: ``{label: [losses of seed 1, losses of seed 2, ...]}``, each a list of losses at steps
            ``0, every, 2 every, ...`` (:class:`~course_embed.lab.tiny_lm.RunResult`).
        every: steps between two recorded losses.
        log_v: the loss of a uniform guess, drawn as a dashed line.
    """
    if not curves:
        raise ValueError("curves is empty; pass {label: [losses per seed]} for at least one setting")
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    _draw_curves(ax, curves, every, log_v)
    ax.set_ylabel("held-out cross-entropy")
    ax.set_title("Tiny models trained on a task that needs the position")
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def plot_training_panels(panels: dict[str, tuple[int, dict[str, list[list[float]]]]], log_v: float):
    """Like :func:`plot_training`, one panel per entry of ``panels`` (title -> ``(every, curves)``), side by side
    with a shared y axis and each panel's legend below it."""
    if not panels or not all(curves for _, curves in panels.values()):
        raise ValueError("panels must map each title to (every, a non-empty {label: [losses per seed]})")
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.8), sharey=True, squeeze=False)
    for ax, (title, (every, curves)) in zip(axes[0], panels.items(), strict=True):
        _draw_curves(ax, curves, every, log_v)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    axes[0, 0].set_ylabel("held-out cross-entropy")
    fig.tight_layout()
    return fig
