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

Context extension (``rope_scaling``, with the key names model configs use; the formulas are in
:mod:`course_embed.rope_scaling`): ``"linear"`` position interpolation
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

from typing import Literal

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from .rope_scaling import (  # the scalings RotaryEmbedding applies; ce.rope_parameters etc. come from here
    ROPE_SCALINGS,
    _check_head_dim,
    _rope_type,
    dynamic_ntk_base,
    llama3_frequencies,
    ntk_base,
    rope_frequencies,
    rope_parameters,
    yarn_attention_factor,
    yarn_frequencies,
    yarn_ramp,
)

# The scalings live in rope_scaling; they are re-exported here so that `rotary` stays the one module to read about RoPE.
__all__ = [
    "LAYOUTS",
    "ROPE_SCALINGS",
    "Layout",
    "RotaryEmbedding",
    "dynamic_ntk_base",
    "layout_permutation",
    "llama3_frequencies",
    "ntk_base",
    "rope_frequencies",
    "rope_parameters",
    "yarn_attention_factor",
    "yarn_frequencies",
    "yarn_ramp",
]

Layout = Literal["interleaved", "half"]
LAYOUTS: tuple[str, ...] = ("interleaved", "half")


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
