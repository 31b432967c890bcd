"""Rotary position embedding (RoPE; Su et al., 2021) and its context-extension scalings.

Shapes: ``b`` batch, ``h`` heads, ``s`` sequence, ``h_d`` head dim (even), ``p = h_d / 2`` rotation pairs.

RoPE turns pair ``i`` of every query and key vector by the angle ``m * theta_i``, where ``m`` is the token's
position and ``theta_i = base**(-2i/h_d)`` (fastest first)::

    (x1, x2) -> (x1 cos(m theta_i) - x2 sin(m theta_i),  x1 sin(m theta_i) + x2 cos(m theta_i))

A rotation keeps norms, and two rotations compose, so ``rope(q, m) . rope(k, n)`` depends on ``m - n`` only.

Which two dims form pair ``i`` is a *layout*; both are in use and give the same attention scores once the rows
of ``W_q`` and ``W_k`` are permuted to match (:func:`layout_permutation`): ``"interleaved"``, dims ``(2i, 2i + 1)``
(RoFormer, Meta's LLaMA and GPT-J code), computed for float32/float64 as one complex multiplication
``(x_{2i} + i x_{2i+1}) * exp(i m theta_i)``; and ``"half"``, dims ``(i, i + h_d/2)`` (``rotate_half``: GPT-NeoX,
the Hugging Face LLaMA checkpoints), computed with four in-place multiply-adds on the half-width views (as is the
interleaved layout in other dtypes).

Context extension (``rope_scaling``, with the key names model configs use): ``"linear"`` position interpolation
(Chen et al., 2023), ``"ntk"`` NTK-aware base scaling (bloc97, 2023), ``"dynamic"`` NTK (emozilla, 2023),
``"yarn"`` (Peng et al., 2024), which also sets an attention temperature (with DeepSeek's ``mscale`` options),
``"llama3"`` (Llama 3.1: a wavelength-based blend of keeping and interpolating) and ``"longrope"`` (Ding et al.,
2024: one searched factor per pair, a short and a long set). The formulas follow Hugging Face
``transformers.modeling_rope_utils``, against which ``tests/test_oracles.py`` checks them.

cos/sin are computed from float64 angles and cached in float64 per length. A float64 input is rotated with the
float64 table; every other dtype gets the table rounded to float32 first and then cast (once per device and
dtype), so float32 results do not depend on whether float64 was ever asked for. Angles in half precision are a
known bug (positions above 256 collide in bfloat16).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn
from torch.autograd.function import once_differentiable

Layout = Literal["interleaved", "half"]
LAYOUTS: tuple[str, ...] = ("interleaved", "half")

#: rope_type -> (required keys, optional keys) of a ``rope_scaling`` dict.
ROPE_SCALINGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "ntk": (("factor",), ()),
    "dynamic": (("factor", "original_max_position_embeddings"), ()),
    "yarn": (
        ("factor", "original_max_position_embeddings"),
        ("beta_fast", "beta_slow", "attention_factor", "truncate", "mscale", "mscale_all_dim"),
    ),
    "llama3": (("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"), ()),
    "longrope": (("factor", "original_max_position_embeddings", "long_factor", "short_factor"), ("attention_factor",)),
}


def _check_head_dim(head_dim: int) -> None:
    if not isinstance(head_dim, int) or head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim must be a positive even integer (RoPE rotates pairs of dims), got {head_dim}")


def _check_base(base: float) -> None:
    if not base > 1:
        raise ValueError(f"base must be greater than 1, got {base}")


def _rope_type(rope_scaling: dict | None) -> str:
    scaling = rope_scaling or {}
    return scaling.get("rope_type", scaling.get("type", "default"))


def rope_frequencies(head_dim: int, base: float = 10000.0, *, dtype=torch.float64, device=None) -> torch.Tensor:
    """Angular frequencies ``theta_i = base**(-2i/h_d)`` of the ``p`` pairs, shape ``(p,)``, fastest first."""
    _check_head_dim(head_dim)
    _check_base(base)
    return base ** -(torch.arange(0, head_dim, 2, dtype=dtype, device=device) / head_dim)


def ntk_base(base: float, head_dim: int, factor: float) -> float:
    """NTK-aware scaling: the base ``base * factor**(h_d / (h_d - 2))``.

    The fastest pair keeps its frequency (``i = 0``) and the slowest is slowed down by exactly ``factor``, so
    high frequencies extrapolate and low frequencies interpolate, with a geometric blend in between.
    """
    if head_dim <= 2:
        raise ValueError(f"NTK scaling needs head_dim > 2 (the exponent is h_d / (h_d - 2)), got {head_dim}")
    return base * factor ** (head_dim / (head_dim - 2))


def dynamic_ntk_base(
    base: float, head_dim: int, factor: float, seq_len: int, original_max_position_embeddings: int
) -> float:
    """Dynamic NTK: the base for a sequence of ``seq_len`` tokens (as ``_compute_dynamic_ntk_parameters``).

    ``base * (factor * L / L0 - (factor - 1))**(h_d / (h_d - 2))`` with ``L = max(seq_len, L0)``: plain RoPE up to
    the original length ``L0``, then a base that grows with the current length.
    """
    if head_dim <= 2:
        raise ValueError(f"NTK scaling needs head_dim > 2 (the exponent is h_d / (h_d - 2)), got {head_dim}")
    original = original_max_position_embeddings
    length = max(seq_len, original)
    return base * (factor * length / original - (factor - 1)) ** (head_dim / (head_dim - 2))


def yarn_attention_factor(factor: float, mscale: float = 1.0) -> float:
    """YaRN's default attention factor ``0.1 mscale ln(factor) + 1`` (1 for ``factor <= 1``).

    It multiplies cos and sin, so the attention logits grow by its square, the paper's ``1/t``. DeepSeek's
    configs set ``mscale`` and ``mscale_all_dim``; the factor is then the ratio of the two (see
    :func:`rope_parameters`).
    """
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_ramp(
    head_dim: int,
    base: float,
    original_max_position_embeddings: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
) -> torch.Tensor:
    """YaRN's interpolation ramp ``gamma_i`` in ``[0, 1]`` per pair, ``(p,)`` float64, fastest pair first.

    Pair ``i`` turns ``r_i = L0 theta_i / (2 pi)`` times over the original length ``L0``. Pairs that turn more than
    ``beta_fast`` times keep their frequency (``gamma = 0``), pairs that turn less than ``beta_slow`` times are
    interpolated by ``factor`` (``gamma = 1``), and the pair index is ramped linearly in between. The bounds are
    the pair indices where ``r = beta``, floored and ceiled when ``truncate`` (the reference code).
    """
    _check_head_dim(head_dim)

    def pair_index(rotations: float) -> float:  # solve L0 * base**(-2i/h_d) / (2 pi) = rotations for i
        return head_dim * math.log(original_max_position_embeddings / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_index(beta_fast), pair_index(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # avoid 0/0, as the reference code does
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    return ((i - low) / (high - low)).clamp(0, 1)


def yarn_frequencies(
    head_dim: int,
    base: float,
    factor: float,
    original_max_position_embeddings: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
) -> torch.Tensor:
    """YaRN ("NTK-by-parts") frequencies ``(p,)`` float64: ``theta_i ((1 - gamma_i) + gamma_i / factor)``."""
    gamma = yarn_ramp(head_dim, base, original_max_position_embeddings, beta_fast, beta_slow, truncate)
    theta = rope_frequencies(head_dim, base)
    return theta * (1 - gamma) + theta / factor * gamma


def llama3_frequencies(
    head_dim: int,
    base: float,
    factor: float,
    original_max_position_embeddings: int,
    low_freq_factor: float,
    high_freq_factor: float,
) -> torch.Tensor:
    """Llama 3.1's frequencies ``(p,)`` float64: keep short wavelengths, interpolate long ones, blend between.

    With wavelength ``lambda_i = 2 pi / theta_i`` and ``L0`` the original length: ``lambda < L0 / high_freq_factor``
    keeps ``theta_i``; ``lambda > L0 / low_freq_factor`` gives ``theta_i / factor``; in between, with
    ``a = (L0 / lambda - low_freq_factor) / (high_freq_factor - low_freq_factor)``, ``(1 - a) theta_i / factor +
    a theta_i``: the same blend as YaRN, but ramped in ``L0 / lambda`` (turns) instead of the pair index.
    """
    if not 0 < low_freq_factor < high_freq_factor:
        raise ValueError(
            f"llama3 needs 0 < low_freq_factor < high_freq_factor, got {low_freq_factor} and {high_freq_factor}"
        )
    theta = rope_frequencies(head_dim, base)
    turns = original_max_position_embeddings / (2 * math.pi / theta)  # L0 / wavelength
    blend = ((turns - low_freq_factor) / (high_freq_factor - low_freq_factor)).clamp(0, 1)
    return theta / factor * (1 - blend) + theta * blend


def rope_parameters(
    head_dim: int, base: float = 10000.0, rope_scaling: dict | None = None, seq_len: int | None = None
) -> tuple[torch.Tensor, float]:
    """Frequencies ``(p,)`` (float64) and attention factor for a model config's ``rope_scaling``.

    Args:
        head_dim: ``h_d`` (even).
        base: ``rope_theta``.
        rope_scaling: ``None`` for plain RoPE, or a dict with ``"rope_type"`` (or the older ``"type"``) in
            :data:`ROPE_SCALINGS` and its keys: ``factor`` (>= 1); ``original_max_position_embeddings`` (the
            training length ``L0``); for YaRN optionally ``beta_fast`` (32), ``beta_slow`` (1), ``truncate``
            (True) and ``attention_factor`` (default :func:`yarn_attention_factor`, or with ``mscale`` and
            ``mscale_all_dim`` the ratio ``yarn_attention_factor(factor, mscale) / yarn_attention_factor(factor,
            mscale_all_dim)``); for llama3 ``low_freq_factor`` and ``high_freq_factor``
            (:func:`llama3_frequencies`); for LongRoPE ``short_factor`` and ``long_factor`` (``p`` divisors of the
            frequencies, the long ones used past ``L0``) and ``attention_factor`` (default
            ``sqrt(1 + ln(factor) / ln(L0))``).
        seq_len: current sequence length, used by ``"dynamic"`` and ``"longrope"`` only.

    Linear interpolation divides the frequencies by ``factor``, which is the same as dividing positions by it.
    """
    rope_type = _rope_type(rope_scaling)
    scaling = {key: value for key, value in (rope_scaling or {}).items() if key not in ("rope_type", "type")}
    if rope_type not in ROPE_SCALINGS:
        raise ValueError(f"rope_scaling['rope_type'] must be one of {tuple(ROPE_SCALINGS)}, got {rope_type!r}")
    required, optional = ROPE_SCALINGS[rope_type]
    missing = [key for key in required if key not in scaling]
    unknown = [key for key in scaling if key not in required + optional]
    if missing or unknown:
        raise ValueError(
            f"rope_scaling of type {rope_type!r} needs the keys {required} and accepts {optional}; "
            f"missing {missing}, unknown {unknown}"
        )
    factor = float(scaling.get("factor", 1.0))
    if factor < 1:
        raise ValueError(f"rope_scaling['factor'] must be >= 1 (new length / training length), got {factor}")
    original = scaling.get("original_max_position_embeddings", 1)
    if not isinstance(original, int) or original < 1:
        raise ValueError(
            f"rope_scaling['original_max_position_embeddings'] must be a positive integer (the "
            f"training length), got {original!r}"
        )
    if rope_type == "default":
        return rope_frequencies(head_dim, base), 1.0
    if rope_type == "linear":
        return rope_frequencies(head_dim, base) / factor, 1.0
    if rope_type == "ntk":
        return rope_frequencies(head_dim, ntk_base(base, head_dim, factor)), 1.0
    if rope_type == "dynamic":
        return rope_frequencies(head_dim, dynamic_ntk_base(base, head_dim, factor, seq_len or 0, original)), 1.0
    if rope_type == "llama3":
        return llama3_frequencies(
            head_dim, base, factor, original, float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        ), 1.0
    attention = scaling.get("attention_factor")
    if rope_type == "longrope":
        divisors = scaling["long_factor"] if (seq_len or 0) > original else scaling["short_factor"]
        if len(divisors) != head_dim // 2:
            raise ValueError(
                f"rope_scaling['long_factor'] and ['short_factor'] need head_dim / 2 = "
                f"{head_dim // 2} values, got {len(divisors)}"
            )
        if attention is None:
            attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
        divisors = torch.tensor(divisors, dtype=torch.float64)
        return rope_frequencies(head_dim, base) / divisors, float(attention)
    if attention is None:
        mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
        attention = (
            yarn_attention_factor(factor, mscale) / yarn_attention_factor(factor, mscale_all_dim)
            if mscale and mscale_all_dim
            else yarn_attention_factor(factor)
        )
    attention = float(attention)
    theta = yarn_frequencies(
        head_dim,
        base,
        factor,
        original,
        scaling.get("beta_fast", 32.0),
        scaling.get("beta_slow", 1.0),
        scaling.get("truncate", True),
    )
    return theta, attention


def layout_permutation(head_dim: int) -> torch.Tensor:
    """Index ``perm`` ``(h_d,)`` that reorders ``"half"``-layout dims into ``"interleaved"`` ones.

    ``x[..., perm]`` puts dim ``i`` and dim ``i + h_d/2`` (pair ``i`` of the half layout) at ``2i`` and ``2i + 1``.
    So ``rope_half(x)[..., perm] == rope_interleaved(x[..., perm])``, and a half-layout checkpoint becomes an
    interleaved one by permuting the output rows of ``W_q`` and ``W_k`` of every head with ``perm``.
    """
    _check_head_dim(head_dim)
    half = head_dim // 2
    return torch.stack((torch.arange(half), torch.arange(half, head_dim)), dim=-1).flatten()


def _pairs(x: torch.Tensor, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of the first and second members of every pair: two ``(..., p)`` tensors."""
    if layout == "interleaved":
        return x[..., 0::2], x[..., 1::2]
    half = x.shape[-1] // 2
    return x[..., :half], x[..., half:]


def _rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """Rotate every pair of ``x`` ``(..., s, h_d)`` by cos/sin ``(s, p)``, writing straight into the result."""
    out = torch.empty_like(x)
    x1, x2 = _pairs(x, layout)
    o1, o2 = _pairs(out, layout)
    torch.mul(x1, cos, out=o1)
    o1.addcmul_(x2, sin, value=-1)
    torch.mul(x2, cos, out=o2)
    o2.addcmul_(x1, sin)
    return out


class _PairRotation(torch.autograd.Function):
    """Autograd for :func:`_rotate_pairs`: the gradient of a rotation is the inverse rotation (``sin -> -sin``)."""

    @staticmethod
    def forward(ctx, x, cos, sin, layout):
        ctx.save_for_backward(cos, sin)
        ctx.layout = layout
        return _rotate_pairs(x, cos, sin, layout)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        return _rotate_pairs(grad, cos, -sin, ctx.layout), None, None, None


def _complex_view(x: torch.Tensor) -> torch.Tensor:
    """``x`` ``(..., h_d)`` seen as ``(..., p)`` complex numbers ``x_{2i} + i x_{2i+1}`` (a copy only if needed)."""
    if x.stride(-1) != 1 or x.storage_offset() % 2 or any(step % 2 for step in x.stride()[:-1]):
        x = x.contiguous()
    return torch.view_as_complex(x.unflatten(-1, (-1, 2)))


class RotaryEmbedding(nn.Module):
    """Rotates queries and keys by their positions (RoPE), optionally with a context-extension scaling.

    Args:
        head_dim: ``h_d`` (even).
        base: ``rope_theta``, 10000 in RoFormer and LLaMA.
        layout: ``"interleaved"`` (adjacent pairs, RoFormer; the fast path) or ``"half"`` (rotate_half, LLaMA-HF).
        rope_scaling: ``None`` or a config dict, see :func:`rope_parameters`. ``attention_factor`` (YaRN's
            temperature) multiplies cos and sin, so rotated vectors are that much longer.
        max_len: rows of the cos/sin cache built up front; longer inputs grow it (to at least twice its size).

    Shapes:
        ``forward(q, k, offset)``: ``(b, h, s, h_d)`` each -> the rotated ``(q, k)``, same shapes, dtypes and
        devices; positions are ``offset .. offset + s - 1`` (``offset`` = tokens already in a KV cache). ``q`` and
        ``k`` may differ in ``b`` and ``h`` (grouped-query attention).

    Frequencies that depend on the current length ``offset + s``: ``"dynamic"`` past ``original_max_position_
    embeddings`` computes the rows it needs from the base for that length (a decoding step costs the same at any
    position); ``"longrope"`` keeps one table for the short and one for the long factors. Keys rotated earlier in
    a KV cache keep their old frequencies, as in the reference implementation.

    Reference: complex multiplication ``(x_{2i} + i x_{2i+1}) * exp(i m theta_i)`` in float64 (tests).
    """

    def __init__(
        self,
        head_dim: int,
        base: float = 10000.0,
        *,
        layout: Layout = "interleaved",
        rope_scaling: dict | None = None,
        max_len: int = 2048,
    ):
        super().__init__()
        _check_head_dim(head_dim)
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if max_len < 1:
            raise ValueError(f"max_len must be a positive integer, got {max_len}")
        self.head_dim, self.base, self.layout = head_dim, base, layout
        self.rope_scaling = dict(rope_scaling) if rope_scaling else None
        self.rope_type = _rope_type(rope_scaling)
        _, self.attention_factor = rope_parameters(head_dim, base, rope_scaling)  # validates rope_scaling
        self._original = (self.rope_scaling or {}).get("original_max_position_embeddings", 1)
        self._masters: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # variant -> float64 (rows, p) cos, sin
        self._derived: dict[tuple, tuple[torch.Tensor, tuple[torch.Tensor, ...]]] = {}  # casts of a master
        self._master("long" if self.rope_type == "longrope" and max_len > self._original else "plain", max_len)

    def _variant(self, end: int) -> str:
        """Which frequencies positions up to ``end`` use: ``"plain"``, ``"long"`` (LongRoPE) or ``"row"``
        (dynamic NTK past the original length: computed per call, never cached)."""
        if end > self._original and self.rope_type in ("dynamic", "longrope"):
            return "row" if self.rope_type == "dynamic" else "long"
        return "plain"

    def _angles(self, start: int, end: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """float64 cos and sin (times the attention factor) of positions ``start .. end - 1``: ``(rows, p)``."""
        theta, scale = rope_parameters(self.head_dim, self.base, self.rope_scaling, seq_len=seq_len)
        angles = torch.arange(start, end, dtype=torch.float64)[:, None] * theta
        return angles.cos() * scale, angles.sin() * scale

    def _master(self, variant: str, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The cached float64 table of ``variant`` with at least ``rows`` rows (grown to twice its size)."""
        cached = self._masters.get(variant)
        if cached is None or cached[0].shape[0] < rows:
            size = max(rows, 2 * cached[0].shape[0]) if cached is not None else rows
            seq_len = self._original + 1 if variant == "long" else min(size, self._original)
            self._masters[variant] = self._angles(0, size, seq_len)
        return self._masters[variant]

    @staticmethod
    def _cast(cos: torch.Tensor, sin: torch.Tensor, device: torch.device, dtype: torch.dtype) -> tuple:
        """float64 cos/sin as ``dtype`` on ``device``: ``(cos, sin)`` or ``(cis,)`` for a complex dtype.
        Anything but float64 and complex128 is rounded to float32 first."""
        if dtype not in (torch.float64, torch.complex128):
            cos, sin = cos.float(), sin.float()
        if dtype.is_complex:
            return (torch.complex(cos, sin).to(device=device, dtype=dtype),)
        return cos.to(device=device, dtype=dtype), sin.to(device=device, dtype=dtype)

    def _rows(self, offset: int, length: int, device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """cos/sin (or cis) for positions ``offset .. offset + length - 1`` in ``dtype`` on ``device``."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0 (the position of the first token), got {offset}")
        end, device = offset + length, torch.device(device or "cpu")
        variant = self._variant(end)
        if variant == "row":
            return self._cast(*self._angles(offset, end, end), device, dtype)
        cos, sin = self._master(variant, end)
        key = (variant, device, dtype)
        source, tables = self._derived.get(key, (None, ()))
        if source is not cos:  # first use, or the master grew since
            tables = self._cast(cos, sin, device, dtype)
            self._derived[key] = (cos, tables)
        return tuple(t[offset:end] for t in tables)

    def cos_sin(
        self, length: int, offset: int = 0, *, dtype=torch.float32, device=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin (times the attention factor) for positions ``offset .. offset + length - 1``: ``(s, p)`` each."""
        cos, sin = self._rows(offset, length, device, dtype)
        return cos, sin

    def rotate(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Rotate ``x`` ``(b, h, s, h_d)`` at positions ``offset .. offset + s - 1``; returns ``(b, h, s, h_d)``."""
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            kind = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
            raise TypeError(
                f"RoPE rotates floating-point queries/keys of shape (batch, heads, seq, head_dim), got {kind}"
            )
        if x.dim() != 4 or x.shape[-1] != self.head_dim:
            raise ValueError(
                f"x must have shape (batch, heads, seq, head_dim={self.head_dim}), got {tuple(x.shape)}; "
                f"from (batch, seq, heads, head_dim) use x.transpose(1, 2)"
            )
        if offset < 0:
            raise ValueError(f"offset must be >= 0 (the position of the first token), got {offset}")
        length = x.shape[-2]
        if self.layout == "interleaved" and x.dtype in (torch.float32, torch.float64):
            complex_dtype = torch.complex64 if x.dtype == torch.float32 else torch.complex128
            (cis,) = self._rows(offset, length, x.device, complex_dtype)
            return torch.view_as_real(_complex_view(x) * cis).flatten(-2)
        cos, sin = self._rows(offset, length, x.device, x.dtype)
        return _PairRotation.apply(x, cos, sin, self.layout)

    def forward(self, q: torch.Tensor, k: torch.Tensor, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate queries and keys ``(b, h, s, h_d)`` at positions ``offset .. offset + s - 1``."""
        if q.shape[-2] != k.shape[-2]:
            raise ValueError(
                f"q and k must cover the same positions, got {q.shape[-2]} and {k.shape[-2]} tokens; "
                f"rotate new keys before appending them to the cache"
            )
        return self.rotate(q, offset), self.rotate(k, offset)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, base={self.base}, layout={self.layout!r}, "
            f"scaling={_rope_type(self.rope_scaling)!r}"
        )
