"""Rotary position embedding (RoPE; Su et al., 2021) and its context-extension scalings.

Shapes: ``b`` batch, ``h`` heads, ``s`` sequence, ``h_d`` head dim (even), ``p = h_d / 2`` rotation pairs.

RoPE turns pair ``i`` of every query and key vector by the angle ``m * theta_i``, where ``m`` is the token's
position and ``theta_i = base**(-2i/h_d)`` (fastest first)::

    (x1, x2) -> (x1 cos(m theta_i) - x2 sin(m theta_i),  x1 sin(m theta_i) + x2 cos(m theta_i))

A rotation keeps norms, and two rotations compose, so ``rope(q, m) . rope(k, n)`` depends on ``m - n`` only.

Which two dims form pair ``i`` is a *layout*; both are in use and give the same attention scores once the
projection weights are permuted to match (:func:`layout_permutation`):

* ``"interleaved"``: dims ``(2i, 2i + 1)``, adjacent pairs, as in RoFormer (and Meta's LLaMA and GPT-J code).
  It is the complex product ``(x_{2i} + i x_{2i+1}) * exp(i m theta_i)``, computed here as one complex
  multiplication: a single pass over ``x``, about as fast as copying it.
* ``"half"``: dims ``(i, i + h_d/2)``, the ``rotate_half`` layout of GPT-NeoX and the Hugging Face LLaMA
  checkpoints. The two members of a pair are ``h_d/2`` apart, so no complex view exists; it is computed with four
  in-place multiply-adds on the half-width views, several times faster than ``q*cos + rotate_half(q)*sin`` but
  slower than the interleaved layout. Permuting the rows of ``W_q`` and ``W_k`` once converts a checkpoint.

Context extension (``rope_scaling``, with the key names model configs use): ``"linear"`` position interpolation
(Chen et al., 2023), ``"ntk"`` NTK-aware base scaling (bloc97, 2023), ``"dynamic"`` NTK (emozilla, 2023) and
``"yarn"`` (Peng et al., 2023), which also sets an attention temperature. The formulas follow Hugging Face
``transformers.modeling_rope_utils``, against which the tests check them.

cos/sin are computed from float64 angles, cached in float32 per length, and cast (once per device and dtype) to
the input's dtype; angles in half precision are a known bug (positions above 256 collide in bfloat16).
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
    "yarn": (("factor", "original_max_position_embeddings"),
             ("beta_fast", "beta_slow", "attention_factor", "truncate")),
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


def dynamic_ntk_base(base: float, head_dim: int, factor: float, seq_len: int,
                     original_max_position_embeddings: int) -> float:
    """Dynamic NTK: the base for a sequence of ``seq_len`` tokens (as ``_compute_dynamic_ntk_parameters``).

    ``base * (factor * L / L0 - (factor - 1))**(h_d / (h_d - 2))`` with ``L = max(seq_len, L0)``: plain RoPE up to
    the original length ``L0``, then a base that grows with the current length.
    """
    if head_dim <= 2:
        raise ValueError(f"NTK scaling needs head_dim > 2 (the exponent is h_d / (h_d - 2)), got {head_dim}")
    original = original_max_position_embeddings
    length = max(seq_len, original)
    return base * (factor * length / original - (factor - 1)) ** (head_dim / (head_dim - 2))


def yarn_attention_factor(factor: float) -> float:
    """YaRN's default attention factor ``0.1 ln(factor) + 1`` (1 for ``factor <= 1``).

    It multiplies cos and sin, so the attention logits grow by its square, the paper's ``1/t``.
    """
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0


def yarn_ramp(head_dim: int, base: float, original_max_position_embeddings: int, beta_fast: float = 32.0,
              beta_slow: float = 1.0, truncate: bool = True) -> torch.Tensor:
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


def yarn_frequencies(head_dim: int, base: float, factor: float, original_max_position_embeddings: int,
                     beta_fast: float = 32.0, beta_slow: float = 1.0, truncate: bool = True) -> torch.Tensor:
    """YaRN ("NTK-by-parts") frequencies ``(p,)`` float64: ``theta_i ((1 - gamma_i) + gamma_i / factor)``."""
    gamma = yarn_ramp(head_dim, base, original_max_position_embeddings, beta_fast, beta_slow, truncate)
    theta = rope_frequencies(head_dim, base)
    return theta * (1 - gamma) + theta / factor * gamma


def rope_parameters(head_dim: int, base: float = 10000.0, rope_scaling: dict | None = None,
                    seq_len: int | None = None) -> tuple[torch.Tensor, float]:
    """Frequencies ``(p,)`` (float64) and attention factor for a model config's ``rope_scaling``.

    Args:
        head_dim: ``h_d`` (even).
        base: ``rope_theta``.
        rope_scaling: ``None`` for plain RoPE, or a dict with ``"rope_type"`` (or the older ``"type"``) in
            :data:`ROPE_SCALINGS` and its keys: ``factor`` (>= 1); ``original_max_position_embeddings`` (the
            training length ``L0``; dynamic and YaRN); for YaRN optionally ``beta_fast`` (32), ``beta_slow`` (1),
            ``attention_factor`` (default :func:`yarn_attention_factor`) and ``truncate`` (True).
        seq_len: current sequence length, used by ``"dynamic"`` only.

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
        raise ValueError(f"rope_scaling of type {rope_type!r} needs the keys {required} and accepts {optional}; "
                         f"missing {missing}, unknown {unknown}")
    factor = float(scaling.get("factor", 1.0))
    if factor < 1:
        raise ValueError(f"rope_scaling['factor'] must be >= 1 (new length / training length), got {factor}")
    original = scaling.get("original_max_position_embeddings", 1)
    if not isinstance(original, int) or original < 1:
        raise ValueError(f"rope_scaling['original_max_position_embeddings'] must be a positive integer (the "
                         f"training length), got {original!r}")
    if rope_type == "default":
        return rope_frequencies(head_dim, base), 1.0
    if rope_type == "linear":
        return rope_frequencies(head_dim, base) / factor, 1.0
    if rope_type == "ntk":
        return rope_frequencies(head_dim, ntk_base(base, head_dim, factor)), 1.0
    if rope_type == "dynamic":
        return rope_frequencies(head_dim, dynamic_ntk_base(base, head_dim, factor, seq_len or 0, original)), 1.0
    attention = scaling.get("attention_factor")
    attention = yarn_attention_factor(factor) if attention is None else float(attention)
    theta = yarn_frequencies(head_dim, base, factor, original, scaling.get("beta_fast", 32.0),
                             scaling.get("beta_slow", 1.0), scaling.get("truncate", True))
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

    With ``"dynamic"`` scaling the frequencies depend on the current length ``offset + s``: the cache is rebuilt
    whenever it changes past ``original_max_position_embeddings``. Keys rotated earlier in a KV cache keep their
    old frequencies, as in the reference implementation.

    Reference: complex multiplication ``(x_{2i} + i x_{2i+1}) * exp(i m theta_i)`` in float64 (tests).
    """

    def __init__(self, head_dim: int, base: float = 10000.0, *, layout: Layout = "interleaved",
                 rope_scaling: dict | None = None, max_len: int = 2048):
        super().__init__()
        _check_head_dim(head_dim)
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if max_len < 1:
            raise ValueError(f"max_len must be a positive integer, got {max_len}")
        self.head_dim, self.base, self.layout = head_dim, base, layout
        self.rope_scaling = dict(rope_scaling) if rope_scaling else None
        _, self.attention_factor = rope_parameters(head_dim, base, rope_scaling)  # validates rope_scaling
        self.dynamic = _rope_type(rope_scaling) == "dynamic"
        self._cos = self._sin = torch.empty(0)
        self._built_for = 0  # the sequence length the cache was built for (it matters to "dynamic" only)
        self._derived: dict[tuple[torch.device, torch.dtype], tuple[torch.Tensor, ...]] = {}
        self._build(max_len, self.rope_scaling["original_max_position_embeddings"] if self.dynamic else max_len)

    def _build(self, rows: int, seq_len: int) -> None:
        """Recompute the float32 cos/sin cache ``(rows, p)`` on the CPU from float64 angles."""
        theta, scale = rope_parameters(self.head_dim, self.base, self.rope_scaling, seq_len=seq_len)
        angles = torch.arange(rows, dtype=torch.float64)[:, None] * theta  # (rows, p)
        self._cos = (angles.cos() * scale).float()
        self._sin = (angles.sin() * scale).float()
        self._built_for = seq_len
        self._derived.clear()

    def _ensure(self, end: int) -> None:
        if self.dynamic:
            original = self.rope_scaling["original_max_position_embeddings"]
            seq_len = max(end, original)
            if seq_len != self._built_for or end > self._cos.shape[0]:
                self._build(seq_len, seq_len)  # seq_len >= end rows
        elif end > self._cos.shape[0]:
            self._build(max(end, 2 * self._cos.shape[0]), end)

    def _tables(self, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """The cache on ``device`` in ``dtype``: ``(cos, sin)``, or ``(cis,)`` for a complex dtype."""
        key = (device, dtype)
        if key not in self._derived:
            if dtype.is_complex:
                self._derived[key] = (torch.complex(self._cos, self._sin).to(device=device, dtype=dtype),)
            else:
                self._derived[key] = (self._cos.to(device=device, dtype=dtype), self._sin.to(device=device, dtype=dtype))
        return self._derived[key]

    def cos_sin(self, length: int, offset: int = 0, *, dtype=torch.float32, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin (times the attention factor) for positions ``offset .. offset + length - 1``: ``(s, p)`` each."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0 (the position of the first token), got {offset}")
        self._ensure(offset + length)
        cos, sin = self._tables(torch.device(device or "cpu"), dtype)
        return cos[offset:offset + length], sin[offset:offset + length]

    def rotate(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Rotate ``x`` ``(b, h, s, h_d)`` at positions ``offset .. offset + s - 1``; returns ``(b, h, s, h_d)``."""
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            kind = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
            raise TypeError(f"RoPE rotates floating-point queries/keys of shape (batch, heads, seq, head_dim), "
                            f"got {kind}")
        if x.dim() != 4 or x.shape[-1] != self.head_dim:
            raise ValueError(f"x must have shape (batch, heads, seq, head_dim={self.head_dim}), got {tuple(x.shape)}; "
                             f"from (batch, seq, heads, head_dim) use x.transpose(1, 2)")
        if offset < 0:
            raise ValueError(f"offset must be >= 0 (the position of the first token), got {offset}")
        length = x.shape[-2]
        self._ensure(offset + length)
        if self.layout == "interleaved" and x.dtype in (torch.float32, torch.float64):
            complex_dtype = torch.complex64 if x.dtype == torch.float32 else torch.complex128
            (cis,) = self._tables(x.device, complex_dtype)
            return torch.view_as_real(_complex_view(x) * cis[offset:offset + length]).flatten(-2)
        cos, sin = self._tables(x.device, x.dtype)
        return _PairRotation.apply(x, cos[offset:offset + length], sin[offset:offset + length], self.layout)

    def forward(self, q: torch.Tensor, k: torch.Tensor, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate queries and keys ``(b, h, s, h_d)`` at positions ``offset .. offset + s - 1``."""
        if q.shape[-2] != k.shape[-2]:
            raise ValueError(f"q and k must cover the same positions, got {q.shape[-2]} and {k.shape[-2]} tokens; "
                             f"rotate new keys before appending them to the cache")
        return self.rotate(q, offset), self.rotate(k, offset)

    def extra_repr(self) -> str:
        return (f"head_dim={self.head_dim}, base={self.base}, layout={self.layout!r}, "
                f"scaling={_rope_type(self.rope_scaling)!r}")
