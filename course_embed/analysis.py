"""Measurements the book prints. Every number a chapter shows is computed here and pinned by a test.

Shapes: ``v`` vocabulary size, ``d`` model width.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .fusion import TransformerEmbedding
from .sinusoidal import inverse_frequencies, offset_rotation, sinusoidal_table

# --- chapter 1: token embedding -------------------------------------------------------------------------------


def init_std(init: str, vocab_size: int, d_model: int) -> float:
    """Closed-form standard deviation of a freshly initialised ``(v, d)`` table.

    ``"normal"`` (``nn.Embedding``'s default) is N(0, 1); ``"xavier_uniform"`` is U(±a) with
    ``a = sqrt(6 / (v + d))``, std ``a / sqrt(3) = sqrt(2 / (v + d))``; ``"scaled_normal"`` is N(0, d**-0.5).
    """
    stds = {"normal": 1.0, "xavier_uniform": math.sqrt(2.0 / (vocab_size + d_model)), "scaled_normal": d_model ** -0.5}
    if init not in stds:
        raise ValueError(f"init must be one of {tuple(stds)}, got {init!r}")
    return stds[init]


def row_norms(weight: torch.Tensor) -> torch.Tensor:
    """Euclidean norm of every row of a ``(v, d)`` table, computed in float64: ``(v,)``."""
    return weight.detach().double().norm(dim=-1)


@dataclass(frozen=True)
class ModelConfig:
    """The sizes that fix a Transformer's parameter count (enough for BERT, GPT-2 and LLaMA-style models).

    ``positions`` is the number of rows of a learned position table (0 for sinusoidal or rotary positions),
    ``token_types`` the rows of BERT's segment table. ``gated_ffn`` means a SwiGLU feed-forward with three
    matrices; ``norm`` is ``"layer"`` (weight and bias) or ``"rms"`` (weight only). ``output`` is ``"tied"``
    (the pre-softmax layer reuses the token table), ``"untied"`` (its own ``(v, d)`` matrix) or ``"none"``
    (an encoder counted without its head).
    """

    name: str
    vocab_size: int
    d_model: int
    n_layers: int
    d_ff: int
    positions: int = 0
    token_types: int = 0
    bias: bool = True
    gated_ffn: bool = False
    norm: str = "layer"
    embedding_norm: bool = False
    final_norm: bool = True
    output: str = "tied"
    pooler: bool = False


def parameter_count(cfg: ModelConfig) -> dict[str, int]:
    """Parameters of ``cfg`` by part: ``token``, ``position``, ``other_embedding``, ``layers``, ``head``, ``total``.

    ``token`` counts the ``(v, d)`` table once even when it is tied to the output layer.
    """
    d = cfg.d_model
    norm = 2 * d if cfg.norm == "layer" else d
    attention = 4 * d * d + (4 * d if cfg.bias else 0)
    if cfg.gated_ffn:
        ffn = 3 * d * cfg.d_ff + ((2 * cfg.d_ff + d) if cfg.bias else 0)
    else:
        ffn = 2 * d * cfg.d_ff + ((cfg.d_ff + d) if cfg.bias else 0)
    parts = {
        "token": cfg.vocab_size * d,
        "position": cfg.positions * d,
        "other_embedding": cfg.token_types * d + (norm if cfg.embedding_norm else 0),
        "layers": cfg.n_layers * (attention + ffn + 2 * norm),
        "head": ((norm if cfg.final_norm else 0) + (cfg.vocab_size * d if cfg.output == "untied" else 0)
                 + (d * d + d if cfg.pooler else 0)),
    }
    parts["total"] = sum(parts.values())
    return parts


#: Published configurations; their totals match the released checkpoints (tested).
BERT_BASE = ModelConfig("BERT-base", 30522, 768, 12, 3072, positions=512, token_types=2, embedding_norm=True,
                        final_norm=False, output="none", pooler=True)
BERT_LARGE = ModelConfig("BERT-large", 30522, 1024, 24, 4096, positions=512, token_types=2, embedding_norm=True,
                         final_norm=False, output="none", pooler=True)
GPT2_SMALL = ModelConfig("GPT-2 small", 50257, 768, 12, 3072, positions=1024)
LLAMA2_7B = ModelConfig("LLaMA-2 7B", 32000, 4096, 32, 11008, bias=False, gated_ffn=True, norm="rms",
                        output="untied")
PUBLISHED_CONFIGS = (BERT_BASE, BERT_LARGE, GPT2_SMALL, LLAMA2_7B)


# --- chapter 2: the sqrt(d) scaling ----------------------------------------------------------------------------

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


# --- chapter 3: sinusoidal mathematics -------------------------------------------------------------------------


def wavelengths(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """Wavelength, in positions, of every dimension: ``(d,)`` float64.

    Dimensions ``2i`` (sine) and ``2i + 1`` (cosine) share the wavelength ``2*pi * base**(2i/d)``: a geometric
    progression from ``2*pi`` (dimensions 0 and 1, the fastest) to ``2*pi * base**((d-2)/d)`` (the last pair,
    the slowest, just under ``base * 2*pi``).
    """
    return (2 * math.pi / inverse_frequencies(d_model, base)).repeat_interleave(2)


def _check_table(table: torch.Tensor, min_rows: int = 1) -> None:
    if not isinstance(table, torch.Tensor) or table.dim() != 2 or table.shape[0] < min_rows:
        shape = tuple(table.shape) if isinstance(table, torch.Tensor) else type(table).__name__
        raise ValueError(f"table must be a (positions, d_model) tensor with at least {min_rows} rows, got {shape}")


def adjacent_change(table: torch.Tensor) -> torch.Tensor:
    """How fast each column changes: the mean of ``|PE[p + 1, j] - PE[p, j]|`` over positions.

    ``(s, d) -> (d,)`` float64, ``s >= 2``. Large for the fast (low-index) dimensions of a sinusoidal table.
    """
    _check_table(table, min_rows=2)
    t = table.detach().double()
    return (t[1:] - t[:-1]).abs().mean(dim=0)


def rotation_error(k: int, d_model: int, *, length: int = 1000, offset: int = 0, base: float = 10000.0,
                   dtype: torch.dtype = torch.float64, device=None) -> float:
    """Largest ``|M_k @ PE[p] - PE[p + k]|`` over ``p = offset .. offset + length - 1``.

    The table (:func:`~course_embed.sinusoidal_table`) and ``M_k`` (:func:`~course_embed.offset_rotation`) are
    both stored in ``dtype`` and multiplied in ``dtype``: the result is the rounding error of that precision,
    since ``PE[p + k] = M_k @ PE[p]`` holds exactly in real arithmetic.
    """
    if not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be an int >= 0 (an offset in positions), got {k!r}")
    if length < 1:
        raise ValueError(f"length must be >= 1 (number of positions p to check), got {length}")
    table = sinusoidal_table(length + k, d_model, base, offset=offset, dtype=dtype, device=device)  # (s + k, d)
    rotation = offset_rotation(k, d_model, base, dtype=dtype).to(table.device)  # (d, d)
    moved = table[:length] @ rotation.T  # (s, d): row p is M_k @ PE[p]
    return (moved - table[k:]).abs().max().item()


def dot_by_offset(max_offset: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """``PE[p] . PE[p + k] = sum_i cos(w_i k)`` for ``k = 0 .. max_offset``: ``(max_offset + 1,)`` float64.

    Closed form: ``sin(a) sin(b) + cos(a) cos(b) = cos(a - b)`` for each pair, so the dot product depends only on
    the offset ``k``, not on ``p``. It starts at ``d/2`` (``k = 0``).
    """
    if max_offset < 0:
        raise ValueError(f"max_offset must be >= 0, got {max_offset}")
    offsets = torch.arange(max_offset + 1, dtype=torch.float64)  # (k,)
    return torch.cos(offsets[:, None] * inverse_frequencies(d_model, base)).sum(dim=1)  # (k, d/2) -> (k,)


def first_rise(d_model: int, base: float = 10000.0, max_offset: int = 10000) -> int | None:
    """The smallest offset ``k >= 1`` with ``dot(k) > dot(k - 1)``: where the dot product stops falling.

    ``None`` if it falls all the way to ``max_offset``.
    """
    dots = dot_by_offset(max_offset, d_model, base)
    rises = torch.nonzero(dots[1:] > dots[:-1]).flatten()
    return int(rises[0]) + 1 if rises.numel() else None


@dataclass(frozen=True)
class ClosestRows:
    """The closest pair of distinct rows of a table: Euclidean ``distance`` between rows ``first < second``."""

    distance: float
    first: int
    second: int


def closest_distinct_rows(table: torch.Tensor) -> ClosestRows:
    """The two distinct rows (different indices) of a ``(s, d)`` table that are closest in Euclidean distance.

    Brute force over all ``s * (s - 1) / 2`` pairs, computed in float64 as ``sqrt(sum((a - b)**2))`` (not the
    matrix-product shortcut, which cannot resolve a distance of exactly 0). Memory grows as ``s**2``. Ties go to
    the first pair in ``(first, second)`` order; rows holding NaN are never closest.
    """
    _check_table(table, min_rows=2)
    t = table.detach().double().cpu()
    dist = torch.cdist(t, t, compute_mode="donot_use_mm_for_euclid_dist")  # (s, s)
    upper = torch.ones_like(dist, dtype=torch.bool).triu(diagonal=1)
    dist = torch.where(upper & ~dist.isnan(), dist, torch.inf)
    index = int(torch.argmin(dist))
    first, second = divmod(index, t.shape[0])
    return ClosestRows(float(dist[first, second]), first, second)


def table_error(table: torch.Tensor, offset: int = 0, base: float = 10000.0) -> float:
    """Largest ``|table - PE|`` against the float64 closed form, for a ``(s, d)`` table of positions
    ``offset .. offset + s - 1``. NaN if the table holds NaN, inf if it holds inf.
    """
    _check_table(table)
    reference = sinusoidal_table(table.shape[0], table.shape[1], base, offset=offset, dtype=torch.float64,
                                 device=table.device)  # (s, d)
    return (table.detach().double() - reference).abs().max().item()


def naive_table(length: int, d_model: int, dtype: torch.dtype, *, offset: int = 0, base: float = 10000.0,
                device=None) -> torch.Tensor:
    """A deliberately buggy sinusoidal table: positions, frequencies and angles all computed in ``dtype``.

    This is what an implementation does when it builds ``arange(max_len)`` in the model's dtype (or under
    autocast). In bfloat16, integers are exact only up to 256, so positions 257, 259, ... round to their
    neighbours and rows repeat; in float16, positions from 65520 on overflow to inf and ``sin(inf)`` is NaN. Compare
    :func:`~course_embed.sinusoidal_table`, which computes angles in float64 and casts at the end.

    Returns ``(s, d)`` in ``dtype``, sines in even columns, cosines in odd ones.
    """
    if length < 0 or offset < 0:
        raise ValueError(f"length and offset must be >= 0, got length={length}, offset={offset}")
    positions = torch.arange(offset, offset + length, device=device).to(dtype)  # (s,): the bug, rounded to dtype
    angles = positions[:, None] * inverse_frequencies(d_model, base, device=device, dtype=dtype)  # (s, d/2)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # (s, d)


def first_repeated_row(table: torch.Tensor) -> tuple[int, int] | None:
    """The first row of a ``(s, d)`` table equal to an earlier row, as ``(row, earlier_row)``; ``None`` if all differ.

    Rows are compared by value; a row holding NaN or inf is never counted as a repeat.
    """
    _check_table(table)
    t = table.detach().cpu()
    finite = torch.isfinite(t).all(dim=1)  # (s,)
    rows = torch.nonzero(finite).flatten()  # indices of the finite rows
    if rows.numel() < 2:
        return None
    _, group = torch.unique(t[finite].double(), dim=0, return_inverse=True)  # equal rows share a group
    first_in_group = torch.full((int(group.max()) + 1,), t.shape[0], dtype=torch.long)
    first_in_group = first_in_group.scatter_reduce(0, group, rows, reduce="amin")
    earlier = first_in_group[group]  # for every finite row, the first row equal to it
    repeats = torch.nonzero(earlier < rows).flatten()
    if not repeats.numel():
        return None
    return int(rows[repeats[0]]), int(earlier[repeats[0]])


def first_nonfinite_row(table: torch.Tensor) -> int | None:
    """Index of the first row of a ``(s, d)`` table that holds NaN or inf; ``None`` if every value is finite."""
    _check_table(table)
    bad = torch.nonzero(~torch.isfinite(table.detach()).all(dim=1)).flatten()
    return int(bad[0]) if bad.numel() else None


def unseen_angle_gap(train_len: int, test_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """How far positions ``train_len .. test_len - 1`` take each sin/cos pair from the angles seen in training.

    For pair ``i`` (frequency ``w_i``), the training positions ``0 .. train_len - 1`` put the pair at angles
    ``w_i * p (mod 2*pi)`` on its circle. The result is, for each pair, the largest angular distance (radians, in
    ``[0, pi]``) from a test position's angle to the nearest training angle: ``(d/2,)`` float64, fastest pair first.
    Near 0 for pairs that turned many times during training; large for pairs that had not completed a turn.
    """
    if not 1 <= train_len < test_len:
        raise ValueError(f"need 1 <= train_len < test_len, got train_len={train_len}, test_len={test_len}")
    turn = 2 * math.pi
    seen_positions = torch.arange(train_len, dtype=torch.float64)
    new_positions = torch.arange(train_len, test_len, dtype=torch.float64)
    gaps = []
    for w in inverse_frequencies(d_model, base).tolist():
        seen = torch.sort((seen_positions * w) % turn).values  # (train_len,)
        new = (new_positions * w) % turn  # (test_len - train_len,)
        right = torch.searchsorted(seen, new)  # index of the first seen angle >= new angle (wraps to 0)
        above = (seen[right % train_len] - new) % turn  # going up the circle to the next seen angle
        below = (new - seen[(right - 1) % train_len]) % turn  # going down to the previous one
        gaps.append(torch.minimum(above, below).max())
    return torch.stack(gaps)


# --- chapter 4: fusion ------------------------------------------------------------------------------------------


def max_abs_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b|`` over all elements, computed in float64; ``a`` and ``b`` must broadcast."""
    return (a.detach().double() - b.detach().double().to(a.device)).abs().max().item()


def fusion_costs(vocab_size: int, d_model: int, d_position: int, max_len: int, n_layers: int, d_ff: int,
                 seq_len: int) -> dict[str, dict[str, int]]:
    """Parameters and forward FLOPs per token of three ways to combine a token table with a position table.

    * ``"add"``: token ``(V, d)`` + positions ``(L, d)``; the model is ``d`` wide.
    * ``"concat"``: the same width ``d``, split: token ``(V, d - d_p)`` and positions ``(L, d_p)`` side by side.
    * ``"concat_wider"``: keep the token width ``d`` and append ``d_p`` position features; every layer is then
      ``d + d_p`` wide.

    ``max_len`` is the number of rows of a learned position table (0 for sinusoidal positions, which have no
    parameters). Layers are GPT-style blocks with biases and two LayerNorms (``parameter_count``'s ``"layers"``),
    ``d_ff`` wide in the feed-forward part whatever the model width. For each variant the dict holds ``token``,
    ``position``, ``embedding`` (their sum), ``layers``, ``width``, ``fuse_flops`` (per token: ``d`` additions for
    ``"add"``, none for a concatenation) and ``layer_flops``: per token, ``2 * layers + 2 * n_layers * seq_len *
    width`` (Kaplan et al., 2020: two FLOPs per weight, plus attention over ``seq_len`` positions).
    """
    if not 0 < d_position < d_model:
        raise ValueError(f"d_position must be in (0, d_model={d_model}), got {d_position}")
    if max_len < 0:
        raise ValueError(f"max_len must be >= 0 (0 for sinusoidal positions), got {max_len}")
    variants = {"add": (d_model, d_model, d_model), "concat": (d_model - d_position, d_position, d_model),
                "concat_wider": (d_model, d_position, d_model + d_position)}
    costs = {}
    for name, (d_token, d_pos, width) in variants.items():
        layers = parameter_count(ModelConfig(name, vocab_size, width, n_layers, d_ff))["layers"]
        costs[name] = {"token": vocab_size * d_token, "position": max_len * d_pos,
                       "embedding": vocab_size * d_token + max_len * d_pos, "layers": layers, "width": width,
                       "fuse_flops": d_model if name == "add" else 0,
                       "layer_flops": 2 * layers + 2 * n_layers * seq_len * width}
    return costs


def expected_abs_cosine(d_model: int) -> float:
    """Exact ``E|cos|`` between a fixed vector and a uniformly random direction in ``R^d``.

    ``Gamma(d/2) / (sqrt(pi) Gamma((d + 1)/2))``, about ``sqrt(2 / (pi d))`` for large ``d``: two random vectors
    are nearly orthogonal in high dimension, which is why a sum can keep both.
    """
    if d_model < 1:
        raise ValueError(f"d_model must be a positive integer, got {d_model}")
    return math.exp(math.lgamma(d_model / 2) - math.lgamma((d_model + 1) / 2)) / math.sqrt(math.pi)


def mean_abs_cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean of ``|cos(a_i, b_i)|`` over pairs of rows, in float64; ``a`` and ``b`` are ``(..., d)`` and broadcast."""
    a, b = torch.broadcast_tensors(a.detach().double(), b.detach().double().to(a.device))
    return torch.nn.functional.cosine_similarity(a, b, dim=-1).abs().mean().item()


def lda_predict(features: torch.Tensor, labels: torch.Tensor, n_classes: int, train_fraction: float = 0.75,
                ridge: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Fit a linear probe (linear discriminant analysis) on the first rows; predict the rest.

    Args:
        features: ``(n, d)``.
        labels: ``(n,)`` integers in ``[0, n_classes)``.
        n_classes: number of classes ``k``.
        train_fraction: the first ``train_fraction * n`` rows fit the probe; the other ``m`` rows are predicted.
        ridge: added to the shared covariance, relative to its mean diagonal, so it is always invertible.

    Returns:
        ``(predicted, true)`` labels of the held-out rows, two ``(m,)`` CPU tensors.

    The probe is Fisher's linear discriminant: class means ``mu_c`` and one within-class covariance ``S``; it
    predicts ``argmax_c x . S^-1 mu_c - mu_c . S^-1 mu_c / 2``, the Bayes rule for Gaussian classes with a shared
    covariance. It is fitted in closed form, in float64 on the CPU, so the result does not depend on the device.
    """
    if features.dim() != 2 or labels.shape != features.shape[:1]:
        raise ValueError(f"features must be (n, d) and labels (n,), got {tuple(features.shape)} and "
                         f"{tuple(labels.shape)}")
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    x, y = features.detach().double().cpu(), labels.detach().long().cpu()
    if y.min() < 0 or y.max() >= n_classes:
        raise ValueError(f"labels must lie in [0, n_classes={n_classes}), got values in [{int(y.min())}, "
                         f"{int(y.max())}]")
    n_train = int(train_fraction * len(x))
    if not 0 < n_train < len(x):
        raise ValueError(f"train_fraction={train_fraction} of {len(x)} rows leaves no rows to fit or to test")
    xt, yt = x[:n_train], y[:n_train]
    counts = torch.bincount(yt, minlength=n_classes).clamp(min=1).double()
    means = torch.zeros(n_classes, x.shape[1], dtype=x.dtype).index_add_(0, yt, xt) / counts[:, None]  # (k, d)
    centred = xt - means[yt]
    cov = centred.T @ centred / n_train
    cov += ridge * cov.diagonal().mean() * torch.eye(x.shape[1], dtype=x.dtype)
    weights = torch.linalg.solve(cov, means.T)  # (d, k)
    bias = -0.5 * (means * weights.T).sum(dim=1)  # (k,)
    return (x[n_train:] @ weights + bias).argmax(dim=1), y[n_train:]


def lda_probe(features: torch.Tensor, labels: torch.Tensor, n_classes: int, train_fraction: float = 0.75,
              tolerance: int = 0, ridge: float = 1e-6) -> float:
    """Held-out accuracy of the linear probe :func:`lda_predict` reading ``labels`` from ``features`` ``(n, d)``.

    A prediction counts as right when ``|predicted - label| <= tolerance`` (for ordered labels such as positions).
    """
    predicted, true = lda_predict(features, labels, n_classes, train_fraction, ridge)
    return ((predicted - true).abs() <= tolerance).double().mean().item()


def fusion_probe(model: TransformerEmbedding, batch: int, seq_len: int, generator: torch.Generator) -> dict[str, float]:
    """How well linear probes recover the token and the position from the vectors ``model`` produces.

    Random ids ``(batch, seq_len)`` (drawn with ``generator``) go through ``model``; each of the
    ``batch * seq_len`` output vectors is one sample. The probes (:func:`lda_predict`) are fitted on the first 75%
    of the sequences and measured on the rest. Returns ``token`` (accuracy over ``vocab_size`` classes),
    ``position`` (over ``seq_len`` classes) and ``position_within_1`` (off by at most one position).
    """
    if model.training and any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules()):
        raise ValueError("model is in training mode, so dropout would add noise to the probed vectors; "
                         "call model.eval() first")
    vocab_size = model.token.vocab_size
    ids = torch.randint(0, vocab_size, (batch, seq_len), generator=generator)
    with torch.no_grad():
        x = model(ids.to(model.token.weight.device)).flatten(0, 1)  # (batch * seq_len, d)
    positions = torch.arange(seq_len).repeat(batch)
    predicted, true = lda_predict(x, positions, seq_len)
    error = (predicted - true).abs()
    return {"token": lda_probe(x, ids.flatten(), vocab_size), "position": (error == 0).double().mean().item(),
            "position_within_1": (error <= 1).double().mean().item()}


def fusion_gradients(model: TransformerEmbedding, ids: torch.Tensor,
                     upstream: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of the token table and of the learned position table for the loss ``sum(model(ids) * upstream)``.

    Args:
        model: a :class:`~course_embed.fusion.TransformerEmbedding` with ``position="learned"``.
        ids: ``(b, s)``.
        upstream: ``(b, s, d)``, the gradient arriving at the output.

    Returns:
        ``(token_grad, position_grad)`` of shapes ``(V, d_token)`` and ``(L, d_p)``; ``model``'s own ``.grad``
        fields are left untouched.
    """
    if model.position != "learned":
        raise ValueError(f"fusion_gradients needs a learned position table, got position={model.position!r}; "
                         f"build the model with position='learned'")
    out = model(ids)
    if upstream.shape != out.shape:
        raise ValueError(f"upstream must have the output's shape {tuple(out.shape)}, got {tuple(upstream.shape)}")
    token_grad, position_grad = torch.autograd.grad((out * upstream).sum(),
                                                    [model.token.weight, model.positions.weight])
    return token_grad, position_grad


def layer_norm_parts(tokens: torch.Tensor, positions: torch.Tensor,
                     eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """Split ``LayerNorm(tokens + positions)`` (no affine) into a token part and a position part.

    LayerNorm subtracts the mean of the vector and divides by its std ``sigma``; both are shared by the two terms,
    so ``LN(t + p) = (t - mean(t)) / sigma + (p - mean(p)) / sigma``. Shapes: ``tokens`` ``(b, s, d)``,
    ``positions`` ``(s, d)`` or ``(b, s, d)``; returns two ``(b, s, d)`` tensors that sum to ``F.layer_norm``.
    """
    tokens, positions = torch.broadcast_tensors(tokens, positions)
    sigma = torch.sqrt((tokens + positions).var(dim=-1, unbiased=False, keepdim=True) + eps)
    return ((tokens - tokens.mean(dim=-1, keepdim=True)) / sigma,
            (positions - positions.mean(dim=-1, keepdim=True)) / sigma)


def scale_balance(tokens: torch.Tensor, positions: torch.Tensor, layer_norm: bool = False) -> dict[str, float]:
    """Mean norms of the fused vector and of its two parts, and the position's share, in float64.

    ``tokens`` ``(b, s, d)`` and ``positions`` ``(s, d)`` are the two terms of the sum; with ``layer_norm`` they
    are first replaced by their parts of ``LayerNorm(tokens + positions)`` (:func:`layer_norm_parts`). Returns
    ``fused_norm``, ``token_norm``, ``position_norm`` and ``position_share``, the mean of
    ``|p| / (|t| + |p|)`` over the vectors.
    """
    t, p = tokens.detach().double(), positions.detach().double().to(tokens.device)
    if layer_norm:
        t, p = layer_norm_parts(t, p)
    t, p = torch.broadcast_tensors(t, p)
    tn, pn = t.norm(dim=-1), p.norm(dim=-1)
    return {"fused_norm": (t + p).norm(dim=-1).mean().item(), "token_norm": tn.mean().item(),
            "position_norm": pn.mean().item(), "position_share": (pn / (tn + pn)).mean().item()}


def binomial_mean_abs_error(n: int, keep: float) -> float:
    """Exact ``E|K / (n keep) - 1|`` for ``K ~ Binomial(n, keep)``.

    This is the expected relative error of the average of ``n`` dropout samples of one entry (kept with
    probability ``keep``, scaled by ``1 / keep``) against the eval-mode value; about ``sqrt(2 (1 - keep) /
    (pi keep n))`` for large ``n``.
    """
    if n < 1 or not 0 < keep <= 1:
        raise ValueError(f"need n >= 1 and keep in (0, 1], got n={n}, keep={keep}")
    if keep == 1:
        return 0.0
    k = torch.arange(n + 1, dtype=torch.float64)
    log_pmf = (math.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)
               + k * math.log(keep) + (n - k) * math.log1p(-keep))
    return (log_pmf.exp() * (k / (n * keep) - 1).abs()).sum().item()


def dropout_statistics(model: TransformerEmbedding, ids: torch.Tensor, n_samples: int) -> dict[str, float]:
    """What the dropout of ``model`` does, measured: eval vs train mode, and the average over many masks.

    Runs ``model(ids)`` (ids ``(b, s)``) twice in eval mode, and in training mode on ``n_samples`` copies of
    ``ids`` stacked along the batch (one forward pass, an independent mask per copy, from the global RNG); then
    restores the model's mode. Returns

    * ``p``: the dropout probability;
    * ``eval_repeat_change``: ``max |eval - eval|`` over two eval runs (0: eval mode is deterministic);
    * ``train_change``: ``max |train - eval|`` for the first training sample;
    * ``zero_fraction``: fraction of the non-zero eval entries that training mode zeroes (expected ``p``);
    * ``kept_scale_error``: ``max |train - eval / (1 - p)|`` over kept entries (0: kept entries are rescaled);
    * ``mean_relative_error``: ``mean |average of the samples - eval| / mean |eval|``, whose expectation is
      :func:`binomial_mean_abs_error` ``(n_samples, 1 - p)``: the expected output equals the eval output.
    """
    p = model.dropout.p
    if not 0 < p < 1:
        raise ValueError(f"the model's dropout probability must be in (0, 1) to measure it, got {p}")
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    was_training = model.training
    with torch.no_grad():
        model.eval()
        clean = model(ids).double()  # (b, s, d)
        again = model(ids).double()
        model.train()
        noisy = model(ids.repeat(n_samples, 1)).double().unflatten(0, (n_samples, ids.shape[0]))  # (n, b, s, d)
    model.train(was_training)
    live = (clean != 0).expand_as(noisy)
    kept = noisy != 0
    return {"p": p, "eval_repeat_change": (again - clean).abs().max().item(),
            "train_change": (noisy[0] - clean).abs().max().item(),
            "zero_fraction": (live & ~kept).sum().item() / live.sum().item(),
            "kept_scale_error": (noisy - clean / (1 - p))[kept].abs().max().item(),
            "mean_relative_error": ((noisy.mean(dim=0) - clean).abs().mean() / clean.abs().mean()).item()}


def pad_influence(embedding: torch.nn.Module, attention: torch.nn.MultiheadAttention, ids: torch.Tensor,
                  n_pads: int, pad_id: int) -> dict[str, float]:
    """How ``n_pads`` trailing pad tokens change the self-attention outputs of the real tokens.

    Args:
        embedding: ids ``(b, s)`` -> ``(b, s, d)``, e.g. a :class:`~course_embed.fusion.TransformerEmbedding`.
        attention: a batch-first ``nn.MultiheadAttention`` of width ``d``.
        ids: real tokens ``(b, s)``, no pads.
        n_pads: pads appended to every sequence.
        pad_id: the pad token id (the embedding's ``padding_idx``).

    Returns ``pad_input_norm`` (mean norm of the vectors at the pad positions: not zero once positions are added),
    ``unmasked`` (``max |change|`` of the real tokens' outputs when pads are attended to) and ``masked`` (the same
    with ``key_padding_mask = ids == pad_id``, which removes the pads' keys).
    """
    if embedding.training or attention.training:
        raise ValueError("call .eval() on embedding and attention first: dropout would make the comparison random")
    if not attention.batch_first:
        raise ValueError("attention must be built with batch_first=True (inputs are (batch, seq, d))")
    if n_pads < 1:
        raise ValueError(f"n_pads must be >= 1, got {n_pads}")
    if bool((ids == pad_id).any()):
        raise ValueError(f"ids must hold only real tokens, but contain the pad id {pad_id}")
    padded = torch.cat((ids, torch.full((ids.shape[0], n_pads), pad_id, dtype=ids.dtype, device=ids.device)), 1)
    with torch.no_grad():
        x, x_pad = embedding(ids), embedding(padded)
        reference = attention(x, x, x, need_weights=False)[0]
        unmasked = attention(x_pad, x_pad, x_pad, need_weights=False)[0]
        masked = attention(x_pad, x_pad, x_pad, key_padding_mask=padded == pad_id, need_weights=False)[0]
    s = ids.shape[1]
    return {"pad_input_norm": x_pad[:, s:].norm(dim=-1).mean().item(),
            "unmasked": max_abs_difference(unmasked[:, :s], reference),
            "masked": max_abs_difference(masked[:, :s], reference)}


#: XLM-R base (Conneau et al., 2020): one SentencePiece vocabulary of 250,002 tokens shared by 100 languages.
XLMR_BASE = ModelConfig("XLM-R base", 250002, 768, 12, 3072, positions=514, token_types=1, embedding_norm=True,
                        final_norm=False, output="none", pooler=True)


def vocabulary_parameters(d_model: int, shared_vocab: int, per_language_vocab: Sequence[int]) -> dict[str, int]:
    """Token-table parameters of one shared vocabulary vs one table per language.

    Returns ``shared`` (``shared_vocab * d``) and ``separate`` (``sum(per_language_vocab) * d``, the size of a
    :class:`~course_embed.multilingual.MultilingualEmbedding` with those vocabularies).
    """
    if shared_vocab < 1 or not per_language_vocab or min(per_language_vocab) < 1:
        raise ValueError(f"vocabulary sizes must be positive, got shared_vocab={shared_vocab} and "
                         f"per_language_vocab={list(per_language_vocab)}")
    return {"shared": shared_vocab * d_model, "separate": sum(per_language_vocab) * d_model}


# --- chapter 6: optimisation ------------------------------------------------------------------------------------


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> dict[str, float]:
    """Error of ``approx`` against ``exact`` (same shape), relative to the RMS of ``exact``, computed in float64.

    ``rms`` is ``rms(approx - exact) / rms(exact)``; ``max`` is ``max |approx - exact| / rms(exact)``.
    """
    a, e = approx.detach().double(), exact.detach().double()
    if a.shape != e.shape:
        raise ValueError(f"approx and exact must have the same shape, got {tuple(a.shape)} and {tuple(e.shape)}")
    scale = e.square().mean().sqrt()
    diff = a - e
    return {"rms": (diff.square().mean().sqrt() / scale).item(), "max": (diff.abs().max() / scale).item()}


def lost_update_fraction(weight: torch.Tensor, step: float, dtype: torch.dtype) -> float:
    """Fraction of weights stored in ``dtype`` that an update of ``+step`` leaves unchanged.

    Round-to-nearest drops an update smaller than half the spacing of ``dtype`` around the weight: in bfloat16
    (8 significant bits) a step of ``1e-4`` is lost on every weight with ``|w| >= 2**-5``. This is why mixed
    precision keeps a float32 master copy of the weights.
    """
    stored = weight.detach().to(dtype)
    updated = (stored.double() + step).to(dtype)  # exact sum, rounded once to the storage dtype
    return (updated == stored).double().mean().item()


class DictCacheEmbedding:
    """An anti-pattern, kept to be measured: a Python dict of rows in front of an embedding.

    ``__call__(ids)`` looks each id up in ``cache`` and calls the embedding for the ones it has not seen, one id
    at a time. It is slower than the lookup it wraps (a dict access and a tensor per token against one gather for
    the batch) and it returns stale rows once the table is trained: the cache holds copies.

    Shapes: ids ``(b, s)`` -> ``(b, s, d)``.
    """

    def __init__(self, embedding: torch.nn.Module):
        self.embedding, self.cache = embedding, {}

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        rows = []
        for i in ids.flatten().tolist():
            if i not in self.cache:
                self.cache[i] = self.embedding(torch.tensor(i, device=ids.device))  # (d,), a copy of row i
            rows.append(self.cache[i])
        return torch.stack(rows).unflatten(0, ids.shape)


def checkpoint_report(embedding: torch.nn.Module, ids: torch.Tensor) -> dict:
    """What gradient checkpointing does to an embedding lookup ``embedding(ids)``, ids ``(b, s)``.

    Returns ``output_bytes`` (the ``(b, s, d)`` activations people expect to save), ``saved_bytes`` (what autograd
    keeps for the lookup's backward: only the ids, which checkpointing keeps too, to recompute), and for each way
    of calling ``torch.utils.checkpoint.checkpoint`` (``"default"``: no ``use_reentrant``; ``"reentrant"``;
    ``"non-reentrant"``): whether the output requires grad, whether ``out.sum().backward()`` gave the table a
    gradient, and the warnings raised.
    """
    import warnings

    from torch.utils.checkpoint import checkpoint

    from . import bench

    report = {"output_bytes": bench.tensor_bytes(embedding(ids)),
              "saved_bytes": bench.saved_tensor_bytes(lambda: embedding(ids))}
    for mode, kwargs in (("default", {}), ("reentrant", {"use_reentrant": True}),
                         ("non-reentrant", {"use_reentrant": False})):
        embedding.zero_grad(set_to_none=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = checkpoint(embedding, ids, **kwargs)
            if out.requires_grad:
                out.sum().backward()
        report[mode] = {"requires_grad": out.requires_grad, "weight_grad": embedding.weight.grad is not None,
                        "warnings": sorted({str(w.message) for w in caught})}
    embedding.zero_grad(set_to_none=True)
    return report


def autocast_dtypes(device_type: str = "cpu", dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.dtype]:
    """Output dtypes under ``torch.autocast(device_type, dtype)``: an embedding lookup stays float32, a linear
    layer runs in ``dtype``. Autocast changes the dtype of matrix multiplications, not of a gather."""
    emb, linear = torch.nn.Embedding(10, 8), torch.nn.Linear(8, 8)
    emb, linear = emb.to(device_type), linear.to(device_type)
    ids = torch.arange(4, device=device_type)[None]
    with torch.autocast(device_type, dtype=dtype):
        looked_up = emb(ids)
        projected = linear(looked_up)
    return {"embedding": looked_up.dtype, "linear": projected.dtype}


def embedding_bag_report(weight: torch.Tensor, ids: torch.Tensor) -> dict:
    """``nn.EmbeddingBag(mode="mean")`` on ids ``(b, s)`` against the lookup ``(b, s, d)``.

    Returns both output shapes and ``max |bag - lookup.mean(1)|``: a bag is one pooled vector per sequence, so
    it cannot replace a per-token lookup (and it is not a faster one).
    """
    bag = torch.nn.functional.embedding_bag(ids, weight, mode="mean")  # (b, d)
    lookup = torch.nn.functional.embedding(ids, weight)  # (b, s, d)
    return {"bag_shape": tuple(bag.shape), "lookup_shape": tuple(lookup.shape),
            "max_diff_to_mean": max_abs_difference(bag, lookup.mean(1))}
