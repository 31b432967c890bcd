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
the Hugging Face checkpoints), computed as one full-width product and two half-width multiply-adds
(:mod:`course_embed.rope_apply`).

Context extension (``rope_scaling``, with the key names model configs use; the formulas are in
:mod:`course_embed.rope_scaling`, the checks and the reading of whole model configs in
:mod:`course_embed.rope_config`): ``"linear"`` position interpolation (Chen et al., 2023), ``"ntk"`` NTK-aware base
scaling (bloc97, 2023), ``"dynamic"`` NTK (emozilla, 2023), ``"yarn"`` (Peng et al., 2024), which also sets an
attention temperature (with DeepSeek's ``mscale`` options, see :func:`~course_embed.rope_scaling.softmax_scale`),
``"llama3"`` (Llama 3.1: a wavelength-based blend of keeping and interpolating) and ``"longrope"`` (Ding et al.,
2024: one searched factor per pair, a short and a long set). The formulas follow Hugging Face
``transformers.modeling_rope_utils``, against which ``tests/test_oracles.py`` checks them.

Angles are computed in float64 and rounded to float32 before any narrower cast (angles in half precision are a known
bug: positions above 256 collide in bfloat16); a float64 input gets float64 tables.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from .checks import check_offset
from .rope_apply import rotate, rotation_tables
from .rope_config import ROPE_SCALINGS, check_rope_scaling, rope_kwargs, rotary_dims
from .rope_scaling import (  # the scalings RotaryEmbedding applies; ce.rope_parameters etc. come from here
    _check_base,
    _check_head_dim,
    dynamic_ntk_base,
    llama3_frequencies,
    ntk_base,
    rope_frequencies,
    rope_parameters,
    softmax_scale,
    yarn_attention_factor,
    yarn_frequencies,
    yarn_ramp,
)

# The scalings live in rope_scaling; they are re-exported here so that `rotary` stays the one module to read about RoPE.
__all__ = [
    "LAYOUTS",
    "ROPE_SCALINGS",
    "DYNAMIC_RULES",
    "DynamicRule",
    "Layout",
    "RotaryEmbedding",
    "dynamic_ntk_base",
    "layout_permutation",
    "llama3_frequencies",
    "ntk_base",
    "rope_frequencies",
    "rope_parameters",
    "softmax_scale",
    "yarn_attention_factor",
    "yarn_frequencies",
    "yarn_ramp",
]

Layout = Literal["interleaved", "half"]
LAYOUTS: tuple[str, ...] = ("interleaved", "half")
DynamicRule = Literal["paper", "transformers"]
DYNAMIC_RULES: tuple[str, ...] = ("paper", "transformers")


def layout_permutation(head_dim: int) -> torch.Tensor:
    """Index ``perm`` ``(h_d,)`` that reorders ``"half"``-layout dims into ``"interleaved"`` ones.

    ``x[..., perm]`` puts dim ``i`` and dim ``i + h_d/2`` (pair ``i`` of the half layout) at ``2i`` and ``2i + 1``.
    So ``rope_half(x)[..., perm] == rope_interleaved(x[..., perm])``, and a half-layout checkpoint becomes an
    interleaved one by permuting the output rows of ``W_q`` and ``W_k`` of every head with ``perm``.
    """
    _check_head_dim(head_dim)
    half = head_dim // 2
    return torch.stack((torch.arange(half), torch.arange(half, head_dim)), dim=-1).flatten()


class RotaryEmbedding(nn.Module):
    """Rotates queries and keys by their positions (RoPE), optionally with a context-extension scaling.

    Args:
        head_dim: ``h_d`` (even).
        base: ``rope_theta``, 10000 in RoFormer and LLaMA (a ``rope_theta`` key in ``rope_scaling`` takes its place).
        layout: ``"interleaved"`` (adjacent pairs, RoFormer) or ``"half"`` (rotate_half, the Hugging Face
            checkpoints).
        rope_scaling: ``None`` or a config dict, see :func:`rope_parameters`; checked here, at construction.
            ``attention_factor`` (YaRN's temperature) multiplies cos and sin, so rotated vectors are that much
            longer. With ``partial_rotary_factor`` ``f`` only the first ``int(h_d f)`` dims of each head rotate.
            For a whole model config use :meth:`from_config`.
        max_len: rows of the cos/sin tables built at the first call (per device and dtype).
        dynamic_rule: which length sets dynamic NTK's base, see below.

    Shapes:
        ``forward(q, k, offset=0, position_ids=None)``: ``(b, h, s, h_d)`` each -> the rotated ``(q, k)``, same
        shapes, dtypes and devices. Positions are ``offset .. offset + s - 1`` (``offset``: tokens already in a KV
        cache; an int, a numpy integer or a 0-d tensor), or per sequence: ``position_ids`` ``(b, s)`` (or
        ``(1, s)``) as Hugging Face takes them, or a 1-d ``offset`` tensor ``(b,)`` meaning ``offset[:, None] +
        arange(s)``. A left-padded batch decodes correctly with ``position_ids = attention_mask.cumsum(-1) - 1``
        (pad positions clamped to 0). ``q`` and ``k`` may differ in ``h`` (grouped-query attention).

    Tables: the rows for positions ``0 .. max(max_len, end) - 1`` are kept per (frequency set, device, dtype),
    keys this module controls, never data pointers. They are built by a call that ends within ``max_len`` or
    covers at least half of the rows up to its end (a cost proportional to the call's own length); a shorter call
    past them (a decoding step, or the first step with LongRoPE's long factors) computes its own rows and keeps
    nothing, so no step pays for a rebuild and the memory held is what ``max_len`` and the longest prompt need.

    Dynamic NTK (``"dynamic"``): up to the original length ``L0`` plain RoPE; past it the base grows with a length
    ``L``, ``base * (factor L / L0 - (factor - 1))**(h_d / (h_d - 2))``, and every row of the call is computed with
    it (keys already in a KV cache keep the frequencies they were rotated with). ``dynamic_rule="paper"``
    (default): ``L`` is the current length ``offset + s`` (the rule of the YaRN paper, section 3.3; stateless).
    ``dynamic_rule="transformers"``: Hugging Face's ``dynamic_rope_update``, which is stateful: ``L`` is the longest
    length seen so far, kept until a call shorter than ``L0`` resets it to ``L0``. The two differ whenever a call is
    shorter than an earlier one but longer than ``L0``: a prompt of 1.25 L0 after one of 1.5 L0 uses 1.5 L0 under
    the transformers rule, 1.25 L0 under the paper's; decoding steps at 2 L0 after a longer prompt likewise.
    transformers' dynamic ``L0`` is ``max_position_embeddings`` (:meth:`from_config` sets it so).

    LongRoPE uses the long factors for every position once the call reaches past ``L0`` (as transformers does).

    Reference: complex multiplication ``(x_{2i} + i x_{2i+1}) * exp(i m theta_i)`` in float64, and transformers'
    ``apply_rotary_pos_emb`` (tests).
    """

    def __init__(
        self,
        head_dim: int,
        base: float = 10000.0,
        *,
        layout: Layout = "interleaved",
        rope_scaling: dict | None = None,
        max_len: int = 2048,
        dynamic_rule: DynamicRule = "paper",
    ):
        super().__init__()
        _check_head_dim(head_dim)
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
            raise ValueError(f"max_len must be a positive integer, got {max_len!r}")
        if dynamic_rule not in DYNAMIC_RULES:
            raise ValueError(
                f"dynamic_rule must be one of {DYNAMIC_RULES} (the current length, or transformers' longest length "
                f"seen), got {dynamic_rule!r}"
            )
        scaling = check_rope_scaling(rope_scaling)
        theta = scaling.get("rope_theta")
        if theta is not None and base != 10000.0 and theta != base:
            raise ValueError(f"base={base} and rope_scaling['rope_theta']={theta} disagree; give the base in one place")
        self.head_dim, self.base, self.layout = head_dim, _check_base(theta or base), layout
        self.rope_scaling = dict(rope_scaling) if rope_scaling else None
        self.rope_type = scaling["rope_type"]
        self.rotary_dim = rotary_dims(head_dim, scaling)
        self.max_len, self.dynamic_rule = max_len, dynamic_rule
        self._scaling = scaling
        # frequency set -> (theta (p,) float64, attention factor); rope_parameters checks every value now
        self._theta = {"plain": rope_parameters(head_dim, self.base, scaling)}
        if self.rope_type == "longrope":
            self._theta["long"] = rope_parameters(head_dim, self.base, scaling, seq_len=self._original + 1)
        self.attention_factor = self._theta["plain"][1]
        self._tables: dict[tuple, tuple[torch.Tensor, ...]] = {}  # (set, device, dtype) -> rows 0 .. n - 1
        self._longest = self._original  # the transformers rule's state

    @classmethod
    def from_config(cls, config, *, layout: Layout = "half", **kwargs) -> RotaryEmbedding:
        """The rotary embedding of a model config, read as transformers reads it.

        Args:
            config: a transformers config object or its dict (transformers 4 ``rope_scaling`` or 5
                ``rope_parameters``); see :func:`~course_embed.rope_config.rope_kwargs` for what is read.
            layout: ``"half"``, the layout of Hugging Face checkpoints.
            kwargs: other arguments of the constructor (``max_len``, ``dynamic_rule``).
        """
        return cls(**(rope_kwargs(config) | {"layout": layout} | kwargs))

    @property
    def _original(self) -> int:
        return self._scaling.get("original_max_position_embeddings", 1)

    def _frequency_set(self, end: int, update: bool = True) -> str | int:
        """The frequencies for a call reaching position ``end - 1``: ``"plain"``, ``"long"``, or a dynamic length."""
        if self.rope_type == "longrope":
            return "long" if end > self._original else "plain"
        if self.rope_type != "dynamic":
            return "plain"
        length = end
        if self.dynamic_rule == "transformers":
            length = end if end > self._longest else (self._original if end < self._original else self._longest)
            if update:
                self._longest = length
        return length if length > self._original else "plain"

    def _angles(self, which: str | int, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """float64 cos and sin (times the attention factor) at ``positions`` ``(n,)`` or ``(b, s)``: ``(..., p)``."""
        if isinstance(which, int):  # dynamic NTK at length `which`
            scaling = self._scaling
            base = dynamic_ntk_base(self.base, self.rotary_dim, scaling["factor"], which, self._original)
            theta, scale = rope_frequencies(self.rotary_dim, base), 1.0
        else:
            theta, scale = self._theta[which]
        device = positions.device if positions.device.type in ("cpu", "cuda") else "cpu"  # MPS has no float64
        angles = positions.to(device=device, dtype=torch.float64)[..., None] * theta.to(device)
        return angles.cos() * scale, angles.sin() * scale

    def _rows(self, start: int, end: int, position_ids, device, dtype) -> tuple[torch.Tensor, ...]:
        """Rotation tables for positions ``start .. end - 1`` ``(s, w)``, or at ``position_ids`` ``(b, 1, s, w)``."""
        which = self._frequency_set(end)
        key = (which, torch.device(device), dtype)
        tables = self._tables.get(key) if isinstance(which, str) else None
        if isinstance(which, str) and (tables is None or tables[0].shape[0] < end):
            if 2 * (end - start) >= end or end <= self.max_len:  # the call covers half the rows: build them
                size = max(end, self.max_len)
                tables = rotation_tables(*self._angles(which, torch.arange(size)), self.layout, dtype, device)
                self._tables[key] = tables
            else:
                tables = None  # a short call past the tables (a decoding step): its own rows, below
        if tables is None:
            positions = torch.arange(start, end) if position_ids is None else position_ids
            tables = rotation_tables(*self._angles(which, positions), self.layout, dtype, device)
            return tuple(t[:, None] for t in tables) if position_ids is not None else tables
        if position_ids is None:
            return tuple(t[start:end] for t in tables)
        return tuple(t[position_ids.to(t.device)][:, None] for t in tables)  # (b, 1, s, w)

    def _positions(self, x: torch.Tensor, offset, position_ids) -> tuple[int, int, torch.Tensor | None]:
        """``(start, end, position_ids or None)`` of a call on ``x`` ``(b, h, s, h_d)``, checked."""
        b, length = x.shape[0], x.shape[-2]
        if isinstance(offset, torch.Tensor) and offset.dim() == 1:
            if position_ids is not None:
                raise ValueError("give per-sequence positions once: a 1-d offset or position_ids, not both")
            position_ids, offset = offset[:, None] + torch.arange(length, device=offset.device), 0
        if position_ids is None:
            start = check_offset(offset)
            return start, start + length, None
        if not isinstance(position_ids, torch.Tensor) or position_ids.is_floating_point():
            raise TypeError("position_ids must be an integer tensor of shape (batch, seq), e.g. mask.cumsum(-1) - 1")
        if position_ids.dim() == 1:
            position_ids = position_ids[None]
        if position_ids.dim() != 2 or position_ids.shape[1] != length or position_ids.shape[0] not in (1, b):
            message = (
                f"position_ids of shape {tuple(position_ids.shape)} do not match x of shape {tuple(x.shape)}: they "
                f"must be (batch, seq) = ({b}, {length}) or (1, {length}); x is (batch, heads, seq, head_dim)"
            )
            if position_ids.shape[-1] == x.shape[1]:
                message += ", and yours looks (batch, seq, heads, head_dim): use x.transpose(1, 2)"
            raise ValueError(message)
        if check_offset(offset) != 0:
            raise ValueError("give positions once: offset or position_ids, not both (add the offset to the ids)")
        lo, hi = (int(v) for v in torch.aminmax(position_ids)) if position_ids.numel() else (0, -1)
        if lo < 0:
            raise ValueError(f"position_ids must be >= 0, got {lo}; clamp the pad positions, e.g. .clamp(min=0)")
        return 0, hi + 1, position_ids.long()

    def _check(self, x: torch.Tensor, name: str = "x") -> None:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            kind = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
            raise TypeError(
                f"{name}: RoPE rotates floating-point queries/keys of shape (batch, heads, seq, head_dim), got {kind}"
            )
        if x.dim() != 4 or x.shape[-1] != self.head_dim:
            raise ValueError(
                f"{name} must have shape (batch, heads, seq, head_dim={self.head_dim}), got {tuple(x.shape)}; "
                f"from (batch, seq, heads, head_dim) use {name}.transpose(1, 2)"
            )

    def cos_sin(
        self, length: int, offset: int = 0, *, dtype=torch.float32, device=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin (times the attention factor) for positions ``offset .. offset + length - 1``: ``(s, p)`` each.

        Computed afresh from float64 angles (no tables, no state changed), rounded through float32 for narrower
        dtypes.
        """
        offset = check_offset(offset)
        which = self._frequency_set(offset + length, update=False)
        cos, sin = self._angles(which, torch.arange(offset, offset + length))
        if dtype != torch.float64:
            cos, sin = cos.float(), sin.float()
        return cos.to(device=device, dtype=dtype), sin.to(device=device, dtype=dtype)

    def rotate(self, x: torch.Tensor, offset=0, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Rotate ``x`` ``(b, h, s, h_d)`` at positions ``offset .. offset + s - 1`` (or ``position_ids``
        ``(b, s)``); returns ``(b, h, s, h_d)``."""
        self._check(x)
        start, end, ids = self._positions(x, offset, position_ids)
        return rotate(x, self._rows(start, end, ids, x.device, x.dtype), self.layout, self.rotary_dim)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, offset=0, position_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate queries and keys ``(b, h, s, h_d)`` at the same positions (see the class docstring)."""
        self._check(q, "q")
        self._check(k, "k")
        if q.shape[-2] != k.shape[-2]:
            message = (
                f"q and k must cover the same positions, got {q.shape[-2]} and {k.shape[-2]} tokens in dim 2 "
                f"(q and k are (batch, heads, seq, head_dim)); rotate new keys before appending them to the cache"
            )
            if q.shape[1] == k.shape[1]:
                message += ", or if yours are (batch, seq, heads, head_dim) use .transpose(1, 2)"
            raise ValueError(message)
        start, end, ids = self._positions(q, offset, position_ids)
        tables = self._rows(start, end, ids, q.device, q.dtype)
        if k.dtype != q.dtype or k.device != q.device:
            return rotate(q, tables, self.layout, self.rotary_dim), self.rotate(k, offset, position_ids)
        return rotate(q, tables, self.layout, self.rotary_dim), rotate(k, tables, self.layout, self.rotary_dim)

    def extra_repr(self) -> str:
        partial = f", rotary_dim={self.rotary_dim}" if self.rotary_dim != self.head_dim else ""
        return (
            f"head_dim={self.head_dim}, base={self.base}, layout={self.layout!r}, scaling={self.rope_type!r}{partial}"
        )
