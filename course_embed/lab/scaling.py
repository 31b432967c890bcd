"""Chapter 2, the sqrt(d) scaling: norms, tied logits, the position probe, half-precision effects, and figures.

Shapes: ``v`` vocabulary size, ``d`` model width, ``s`` positions, ``n`` vectors (leading dims flattened).
Figures are returned as ``Figure`` objects and never shown here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch

from .token_embedding import init_std, row_norms

# Shapes here also use ``s`` positions, ``n`` vectors (any leading dims flattened).


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
        raise ValueError(f"hidden has width {hidden.shape[-1]} but weight is {tuple(weight.shape)}; "
                         f"hidden must be (..., d) and weight (v, d)")
    if targets.shape != hidden.shape[:-1]:
        raise ValueError(f"targets must have shape {tuple(hidden.shape[:-1])} (hidden without its last dimension), "
                         f"got {tuple(targets.shape)}")
    logits = hidden.detach().double().reshape(-1, hidden.shape[-1]) @ weight.detach().double().T  # (n, v)
    target_logits = logits.gather(1, targets.reshape(-1, 1).to(logits.device)).squeeze(1)  # (n,)
    loss = (torch.logsumexp(logits, dim=-1) - target_logits).mean()
    top = logits.softmax(dim=-1).amax(dim=-1).mean()
    return LogitStats(logits.std().item(), loss.item(), top.item())


@dataclass(frozen=True)
class ProbeResult:
    """Test-set result of a position probe, with what random guessing would score."""

    accuracy: float
    mean_abs_error: float
    chance_accuracy: float
    chance_abs_error: float


def position_probe(tokens: torch.Tensor | None, positions: torch.Tensor, sequences: int,
                   generator: torch.Generator) -> ProbeResult:
    """How well a linear probe recovers the position from ``token + position`` vectors.

    Draws ``2 * sequences`` sequences of ``s`` uniformly random token ids, adds the position rows, fits the probe
    on the first half and scores it on the second. The probe is a nearest-centroid classifier: one mean vector
    ``c_p`` per position from the training half, and the score ``x . c_p - ||c_p||^2 / 2`` (linear in ``x``).
    With token vectors of i.i.d. entries (the three inits) the token acts as isotropic noise, for which this rule
    is the optimal (linear discriminant) classifier, so a low accuracy means the position is buried, not that
    the probe is weak.

    Args:
        tokens: the vectors the embedding outputs for each id, ``(v, d)`` (table times multiplier), or ``None``
            for the position vectors alone.
        positions: position vectors ``(s, d)``, e.g. :func:`~course_embed.sinusoidal.sinusoidal_table`.
        sequences: sequences per half; each position gets this many training and test vectors.
        generator: CPU generator that draws the token ids (the result is a function of its seed).

    Returns:
        :class:`ProbeResult`: accuracy and mean absolute error (in positions) on the test half, and the values of
        a uniform random guess, ``1 / s`` and ``(s^2 - 1) / (3 s)``.
    """
    if positions.dim() != 2:
        raise ValueError(f"positions must have shape (s, d), got {tuple(positions.shape)}")
    if sequences < 1:
        raise ValueError(f"sequences must be a positive integer, got {sequences}")
    s, d = positions.shape
    pe = positions.detach().double()
    x = pe.expand(2 * sequences, s, d)  # (2n, s, d)
    if tokens is not None:
        if tokens.dim() != 2 or tokens.shape[1] != d:
            raise ValueError(f"tokens must have shape (v, {d}) to match positions {tuple(positions.shape)}, "
                             f"got {tuple(tokens.shape)}")
        ids = torch.randint(0, tokens.shape[0], (2 * sequences, s), generator=generator).to(tokens.device)
        x = tokens.detach().double()[ids] + pe.to(tokens.device)
    centroids = x[:sequences].mean(dim=0)  # (s, d)
    test = x[sequences:].reshape(-1, d)  # (n * s, d)
    scores = test @ centroids.T - 0.5 * centroids.pow(2).sum(dim=-1)  # (n * s, s)
    predicted = scores.argmax(dim=-1).cpu()
    truth = torch.arange(s).repeat(sequences)
    return ProbeResult(accuracy=(predicted == truth).double().mean().item(),
                       mean_abs_error=(predicted - truth).abs().double().mean().item(),
                       chance_accuracy=1 / s, chance_abs_error=(s * s - 1) / (3 * s))


def _check_float_dtype(dtype: torch.dtype) -> torch.finfo:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype such as torch.bfloat16, got {dtype!r}")
    return torch.finfo(dtype)


def spacing(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Gap between consecutive numbers of ``dtype`` at ``|x|`` (the unit in the last place), float64, shape of ``x``.

    For ``|x|`` in ``[2^e, 2^(e+1))`` it is ``2^e * eps``: 0.125 for bfloat16 near 20, 0.0078 near 1. Below
    the smallest normal number it is the constant subnormal step ``tiny * eps``.
    """
    info = _check_float_dtype(dtype)
    a = x.detach().double().abs().clamp_min(info.tiny)
    return torch.exp2(torch.floor(torch.log2(a))) * info.eps


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


def overflow_headroom(x: torch.Tensor, dtype: torch.dtype) -> float:
    """How many times larger ``x`` could get before its largest entry overflows ``dtype``: ``max(dtype) / max|x|``."""
    info = _check_float_dtype(dtype)
    largest = x.detach().double().abs().max().item()
    return math.inf if largest == 0 else info.max / largest


def squared_norm_overflow(x: torch.Tensor, dtype: torch.dtype) -> float:
    """Fraction of the vectors ``x`` ``(*, d)`` whose squared norm ``x . x`` overflows when stored in ``dtype``.

    ``x`` is first cast to ``dtype`` (the model holds it there); ``x . x`` is then summed exactly (float64, as a
    float32-accumulating kernel nearly does) and counts as an overflow when it rounds to infinity in ``dtype``,
    i.e. reaches ``max + spacing(max) / 2`` (65520 in float16). ``x . x`` is the diagonal of ``x @ x.T``, the kind of
    sum an attention score or an un-normalised variance forms. For N(0, 1) tables times ``sqrt(d)``, ``||x||^2`` is
    about ``d^2``, so float16 overflows from ``d = 256`` on.
    """
    info = _check_float_dtype(dtype)
    limit = info.max + spacing(torch.tensor(info.max), dtype).item() / 2
    squares = x.detach().to(dtype).double().pow(2).sum(dim=-1)
    return (squares >= limit).double().mean().item()




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
            :func:`~course_embed.lab.scaling.output_row_norms`.
        position_norm: the sinusoidal row norm, :func:`~course_embed.lab.scaling.sinusoidal_norm`.
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
        ratios: ``{label: ratio at each d}``, e.g. :func:`~course_embed.lab.scaling.token_to_position_ratio`.
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
        accuracies: test accuracies in ``[0, 1]`` (:func:`~course_embed.lab.scaling.position_probe`).
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


