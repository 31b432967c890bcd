"""Rotary position embedding (RoPE; Su et al., 2021) and its context-extension scalings.

Shapes: ``b`` batch, ``h`` heads, ``s`` sequence, ``h_d`` head dim (even), ``p`` rotation pairs (``h_d / 2``, or
fewer with ``partial_rotary_factor``), ``r = 2 p`` rotated dims.

RoPE turns pair ``i`` of every query and key vector by the angle ``m * theta_i``, where ``m`` is the token's
position and ``theta_i = base**(-2i/h_d)`` (fastest first)::

    (x1, x2) -> (x1 cos(m theta_i) - x2 sin(m theta_i),  x2 cos(m theta_i) + x1 sin(m theta_i))

A rotation keeps norms, and two rotations compose, so ``rope(q, m) . rope(k, n)`` depends on ``m - n`` only.

Which two dims form pair ``i`` is a *layout*; both are in use and give the same attention scores once the rows
of ``W_q`` and ``W_k`` are permuted to match (:func:`layout_permutation`): ``"interleaved"``, dims ``(2i, 2i + 1)``
(RoFormer, Meta's LLaMA and GPT-J code), and ``"half"``, dims ``(i, i + r/2)`` (``rotate_half``: GPT-NeoX, the
Hugging Face checkpoints).

Context extension (``rope_scaling``, with the key names model configs use) only changes the frequencies
``theta_i`` and multiplies cos and sin by an attention factor: each type is a pure function from the config to
both, in :mod:`course_embed.rope_scaling`; :mod:`course_embed.rope_config` checks configs and reads whole model
configs. The formulas follow Hugging Face ``transformers.modeling_rope_utils``, against which
``tests/test_oracles.py`` checks them.

There are no tables: like transformers, every call computes the cos and sin of its own positions from the
frequencies (a ``(p,)`` buffer), in float64, rounded to float32 before any narrower cast (angles in half precision
are a known bug: positions above 256 collide in bfloat16); a float64 input is rotated with float64 cos/sin. So
no position is "past the table", no state grows, and nothing syncs the host with the device.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from .checks import Fixed, check_device_dtype, check_heads, check_positions_nonnegative, fix, rope_positions
from .rope_config import ROPE_SCALINGS, check_rope_scaling, rope_kwargs, rotary_dims
from .rope_scaling import (  # re-exported: `rotary` is the one module to read about RoPE
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

__all__ = [
    "LAYOUTS",
    "ROPE_SCALINGS",
    "DYNAMIC_RULES",
    "DynamicRule",
    "Layout",
    "RotaryEmbedding",
    "TransformersRotary",
    "apply_rotary",
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

    Shapes:
        ``(h_d,)``, an int64 permutation of ``0 .. h_d - 1``.

    Example:
        >>> import torch, course_embed as ce
        >>> perm = ce.layout_permutation(8)
        >>> perm
        tensor([0, 4, 1, 5, 2, 6, 3, 7])
        >>> q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)  # (b, h, s, h_d)
        >>> half, interleaved = ce.RotaryEmbedding(8, layout="half"), ce.RotaryEmbedding(8)
        >>> q_half, _ = half(q, k)
        >>> q_interleaved, _ = interleaved(q[..., perm], k[..., perm])
        >>> bool(torch.allclose(q_half[..., perm], q_interleaved, atol=1e-6))
        True
    """
    _check_head_dim(head_dim)
    half = head_dim // 2
    return torch.stack((torch.arange(half), torch.arange(half, head_dim)), dim=-1).flatten()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """Rotate the first ``r = 2p`` dims of ``x`` ``(b, h, s, h_d)`` pair by pair; the rest pass through.

    ``cos`` and ``sin`` ``(b, 1, s, p)`` (or broadcastable) are those of the angles ``m theta_i``.

    ``"interleaved"``: pair ``i`` is the complex number ``x_{2i} + i x_{2i+1}``, and the rotation is one complex
    multiplication by ``cos + i sin`` (``(x1 cos - x2 sin) + i (x2 cos + x1 sin)``), in float32 (float64 for a
    float64 ``x``) and cast back, as Meta's LLaMA code does (``llama/model.py``). ``"half"``: the same two products
    in ``x``'s dtype, with cos and sin cast to it, as transformers' ``apply_rotary_pos_emb`` does.
    """
    p = cos.shape[-1]
    if layout == "interleaved":
        wide = torch.float64 if x.dtype == torch.float64 else torch.float32
        pairs = torch.view_as_complex(x[..., : 2 * p].to(wide).unflatten(-1, (p, 2)).contiguous())  # (b, h, s, p)
        turn = torch.complex(cos.to(x.device, wide), sin.to(x.device, wide))
        rotated = torch.view_as_real(pairs * turn).flatten(-2).to(x.dtype)
    else:
        cos, sin = cos.to(x), sin.to(x)
        x1, x2 = x[..., :p], x[..., p : 2 * p]  # dims i and i + p
        rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    if 2 * p == x.shape[-1]:
        return rotated
    return torch.cat((rotated, x[..., 2 * p :]), dim=-1)  # partial RoPE (Phi, GPT-NeoX): the rest passes


class RotaryEmbedding(nn.Module):
    """Rotates queries and keys by their positions (RoPE), optionally with a context-extension scaling.

    Args:
        head_dim: ``h_d`` (even).
        base: ``rope_theta``; ``None`` (default) means ``rope_scaling["rope_theta"]`` if given, else 10000
            (RoFormer, LLaMA). Giving both with different values raises.
        layout: ``"interleaved"`` (adjacent pairs, RoFormer) or ``"half"`` (rotate_half, the Hugging Face
            checkpoints).
        rope_scaling: ``None`` or a config dict, see :func:`rope_parameters`; checked here, at construction.
            ``attention_factor`` (YaRN's temperature) multiplies cos and sin, so rotated vectors are that much
            longer. With ``partial_rotary_factor`` ``f`` only the first ``int(h_d f)`` dims of each head rotate.
            For a whole model config use :meth:`from_config`.
        dynamic_rule: which length sets dynamic NTK's base, see below.
        device: where the frequencies live (they follow ``module.to``).

    Shapes:
        ``forward(q, k, offset=0, position_ids=None)``: ``(b, h, s, h_d)`` each -> the rotated ``(q, k)``, same
        shapes, dtypes and devices. Positions are ``offset .. offset + s - 1`` (``offset``: tokens already in a KV
        cache; an int, a numpy integer or a 0-d tensor), or per sequence: ``position_ids`` ``(b, s)`` (or
        ``(1, s)``) as Hugging Face takes them, or a 1-d ``offset`` tensor ``(b,)`` meaning ``offset[:, None] +
        arange(s)``. A left-padded batch decodes correctly with ``position_ids = attention_mask.cumsum(-1) - 1``
        (pad positions clamped to 0). ``q`` and ``k`` may differ in ``h`` (grouped-query attention). Nothing in
        the shapes tells ``(b, h, s, h_d)`` from ``(b, s, h, h_d)`` when ``q`` and ``k`` have as many heads:
        transpose the latter with ``q.transpose(1, 2)``.

    Buffers (not saved in the ``state_dict``: they are computed from the arguments): ``inv_freq`` ``(p,)`` float64
    (LongRoPE also ``inv_freq_long``, used once a call reaches past the original length ``L0``), and for
    ``dynamic_rule="transformers"`` the longest length seen. ``module.to``, ``.double()``, ``.half()`` and
    ``to_empty`` recompute the frequencies in float64 on the new device, so they are never a widened or narrowed
    copy; :meth:`reset_parameters` does the same after deferred initialisation on the meta device.

    Dynamic NTK (``"dynamic"``): up to ``L0`` plain RoPE; past it the base grows with a length ``L``,
    ``base * (factor L / L0 - (factor - 1))**(r / (r - 2))``, and the whole call uses it (keys already in a KV
    cache keep the frequencies they were rotated with). ``dynamic_rule="paper"`` (default): ``L`` is the call's
    length, its largest position plus one (the rule of the YaRN paper, section 3.3; stateless).
    ``dynamic_rule="transformers"``: Hugging Face's ``dynamic_rope_update``, which is stateful: ``L`` is the longest
    length seen so far, kept until a call shorter than ``L0`` resets it to ``L0``. The two differ whenever a call is
    shorter than an earlier one but longer than ``L0``. transformers' dynamic ``L0`` is
    ``max_position_embeddings`` (:meth:`from_config` sets it so). All of it is computed on the device, so a call
    with ``position_ids`` never waits for their values.

    Reference: complex multiplication ``(x_{2i} + i x_{2i+1}) * exp(i m theta_i)`` in float64, and transformers'
    ``apply_rotary_pos_emb`` with its rotary modules (tests).

    Example:
        >>> import torch, course_embed as ce
        >>> rope = ce.RotaryEmbedding(64)
        >>> q, k = torch.randn(2, 8, 5, 64), torch.randn(2, 2, 5, 64)  # (b, h, s, h_d), 2 KV heads
        >>> q_rot, k_rot = rope(q, k, offset=3)  # positions 3 .. 7
        >>> q_rot.shape, k_rot.shape
        (torch.Size([2, 8, 5, 64]), torch.Size([2, 2, 5, 64]))
        >>> bool(torch.allclose(q_rot.norm(dim=-1), q.norm(dim=-1), atol=1e-5))  # rotations keep norms
        True

        A model with many layers can compute cos and sin once per forward and share them, as transformers does:
        :meth:`cos_sin`, then ``course_embed.rotary.apply_rotary`` in each layer.

        >>> from course_embed.rotary import apply_rotary
        >>> cos, sin = rope.cos_sin(torch.arange(3, 8).expand(2, 5))  # positions (b, s) -> (b, 1, s, p) each
        >>> bool(torch.equal(apply_rotary(q, cos, sin, rope.layout), q_rot))
        True
    """

    head_dim = Fixed()
    base = Fixed()
    layout = Fixed()
    rope_scaling = Fixed()
    rope_type = Fixed()
    rotary_dim = Fixed()
    attention_factor = Fixed()
    dynamic_rule = Fixed()

    inv_freq: torch.Tensor

    def __init__(
        self,
        head_dim: int,
        base: float | None = None,
        *,
        layout: Layout = "interleaved",
        rope_scaling: dict | None = None,
        dynamic_rule: DynamicRule = "paper",
        device=None,
    ):
        super().__init__()
        head_dim = _check_head_dim(head_dim)
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if dynamic_rule not in DYNAMIC_RULES:
            raise ValueError(
                f"dynamic_rule must be one of {DYNAMIC_RULES} (the current length, or transformers' longest length "
                f"seen), got {dynamic_rule!r}"
            )
        check_device_dtype(device)
        scaling = check_rope_scaling(rope_scaling)
        theta = scaling.get("rope_theta")
        if base is not None and theta is not None and float(base) != theta:
            raise ValueError(
                f"base={base} and rope_scaling['rope_theta']={theta} disagree; give the base in one place (leave "
                f"base=None to take the config's)"
            )
        base = base if base is not None else (theta or 10000.0)
        _, attention = rope_parameters(head_dim, base, scaling)  # checks every value now
        fix(
            self,
            head_dim=head_dim,
            base=float(base),
            layout=layout,
            rope_scaling=dict(rope_scaling) if rope_scaling else None,
            rope_type=scaling["rope_type"],
            rotary_dim=rotary_dims(head_dim, scaling),
            attention_factor=attention,
            dynamic_rule=dynamic_rule,
        )
        self._scaling = scaling
        self._original = scaling.get("original_max_position_embeddings", 1)  # L0
        self.register_buffer("inv_freq", torch.empty(0, device=device), persistent=False)
        if self.rope_type == "longrope":
            self.register_buffer("inv_freq_long", torch.empty(0, device=device), persistent=False)
        if self.dynamic_rule == "transformers" and self.rope_type == "dynamic":
            self.register_buffer("longest", torch.empty((), dtype=torch.long, device=device), persistent=False)
        self.reset_parameters()

    @classmethod
    def from_config(cls, config, *, layout: Layout = "half", **kwargs) -> RotaryEmbedding:
        """The rotary embedding of a model config, read as transformers reads it.

        Args:
            config: a transformers config object or its dict (transformers 4 ``rope_scaling`` or 5
                ``rope_parameters``, GPT-NeoX's ``rotary_emb_base`` and ``rotary_pct``); see
                :func:`~course_embed.rope_kwargs` for what is read.
            layout: ``"half"``, the layout of Hugging Face checkpoints.
            kwargs: other arguments of the constructor (``dynamic_rule``, ``device``).
        """
        return cls(**(rope_kwargs(config) | {"layout": layout} | kwargs))

    def reset_parameters(self) -> None:
        """Compute the frequencies (float64, on the buffers' device) and reset the dynamic rule's state."""
        self._build_frequencies()
        if hasattr(self, "longest"):
            self.longest.fill_(self._original)

    def _build_frequencies(self) -> None:
        device = self.inv_freq.device
        dtype = torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64
        freqs, _ = rope_parameters(self.head_dim, self.base, self._scaling)
        self.inv_freq = freqs.to(device=device, dtype=dtype)
        if self.rope_type == "longrope":
            long, _ = rope_parameters(self.head_dim, self.base, self._scaling, seq_len=self._original + 1)
            self.inv_freq_long = long.to(device=device, dtype=dtype)

    def _apply(self, fn, recurse=True):
        """``module.to``, ``.double()``, ``to_empty``, ...: move the buffers, then recompute the frequencies there."""
        super()._apply(fn, recurse)
        if self.inv_freq.device.type != "meta":
            self._build_frequencies()
        return self

    def frequencies(self, end: torch.Tensor) -> torch.Tensor:
        """The inverse frequencies ``(p,)`` of a call reaching position ``end - 1`` (``end``: a 0-d int64 tensor, the
        longest sequence of the batch, as in transformers); only LongRoPE and dynamic NTK depend on it."""
        if self.rope_type == "longrope":
            return torch.where(end > self._original, self.inv_freq_long, self.inv_freq)
        if self.rope_type != "dynamic":
            return self.inv_freq
        length = end.to(self.inv_freq.device)
        if self.dynamic_rule == "transformers":
            longest = torch.where(length < self._original, self._original, self.longest)
            length = torch.maximum(length, longest)
            self.longest.copy_(length)
        length = length.clamp(min=self._original).to(self.inv_freq.dtype)
        factor, r = self._scaling["factor"], self.rotary_dim
        base = self.base * (factor * length / self._original - (factor - 1)) ** (r / (r - 2))
        exponents = torch.arange(0, r, 2, device=self.inv_freq.device, dtype=self.inv_freq.dtype) / r
        return base**-exponents

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
        """cos and sin (times the attention factor) of the angles at ``positions`` ``(b, s)``: ``(b, 1, s, p)``
        each in ``dtype``, from float64 angles rounded once to float32 (then to a narrower dtype)."""
        end = positions.amax() + 1 if positions.numel() else positions.new_zeros(())  # the call's length
        angles = positions[:, None, :, None].to(self.inv_freq.dtype) * self.frequencies(end)  # (b, 1, s, p)
        # One tensor, not two: torch.compile (Inductor) inlines an elementwise result into the loop that reads it,
        # so separate cos and sin would be computed again for every head of q and k; a concatenation is computed
        # once (benchmarks/rope.py, the "half compiled" row).
        cos_sin = torch.cat((angles.cos(), angles.sin()), dim=-1) * self.attention_factor  # (b, 1, s, 2p)
        if dtype != torch.float64:
            cos_sin = cos_sin.float()
        return cos_sin.to(dtype).chunk(2, dim=-1)

    def rotate(self, x: torch.Tensor, offset=0, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Rotate ``x`` ``(b, h, s, h_d)`` at positions ``offset .. offset + s - 1`` (or ``position_ids``
        ``(b, s)``); returns ``(b, h, s, h_d)``."""
        check_heads(x, self.head_dim)
        wide = torch.float64 if x.dtype == torch.float64 else torch.float32
        return apply_rotary(x, *self.cos_sin(rope_positions(x, offset, position_ids), wide), self.layout)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, offset=0, position_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate queries ``(b, h_q, s, h_d)`` and keys ``(b, h_k, s, h_d)`` at the same positions (see the class
        docstring). cos and sin are computed once, in float64 if q or k is float64, else in float32."""
        check_heads(q, self.head_dim, "q")
        check_heads(k, self.head_dim, "k", tokens=q.shape[-2])
        wide = torch.float64 if torch.float64 in (q.dtype, k.dtype) else torch.float32
        cos, sin = self.cos_sin(rope_positions(q, offset, position_ids), wide)  # (b, 1, s, p) each
        return apply_rotary(q, cos, sin, self.layout), apply_rotary(k, cos, sin, self.layout)

    def for_transformers(self) -> TransformersRotary:
        """This RoPE as a Hugging Face rotary module: ``model.model.rotary_emb = rope.for_transformers()``.

        The returned module's ``forward(x, position_ids)`` gives transformers' ``(cos, sin)`` ``(b, s, r)`` in
        ``x``'s dtype, which the model's own ``apply_rotary_pos_emb`` uses (the ``"half"`` layout only).
        """
        if self.layout != "half":
            raise ValueError(
                f"transformers' apply_rotary_pos_emb rotates the 'half' layout, this RoPE has layout={self.layout!r}; "
                f"build it with RotaryEmbedding.from_config(config), whose layout is 'half'"
            )
        return TransformersRotary(self)

    def extra_repr(self) -> str:
        partial = f", rotary_dim={self.rotary_dim}" if self.rotary_dim != self.head_dim else ""
        return (
            f"head_dim={self.head_dim}, base={self.base}, layout={self.layout!r}, scaling={self.rope_type!r}{partial}"
        )


class TransformersRotary(nn.Module):
    """A :class:`RotaryEmbedding` in the place of a Hugging Face model's ``rotary_emb``.

    ``forward(x, position_ids)``: ``x`` any tensor whose dtype and device the result takes (transformers passes
    the hidden states), ``position_ids`` ``(b, s)`` -> ``(cos, sin)`` ``(b, s, r)`` each, the angles' cosine and
    sine (times the attention factor) in transformers' ``rotate_half`` order ``[c_0 .. c_{p-1}, c_0 .. c_{p-1}]``.
    """

    def __init__(self, rope: RotaryEmbedding):
        super().__init__()
        self.rope = rope

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        """``kwargs`` (such as ``layer_type``) are accepted for transformers' call signature and not used."""
        positions = check_positions_nonnegative(position_ids.to(device=x.device, dtype=torch.long))
        cos, sin = self.rope.cos_sin(positions, x.dtype)
        return torch.cat((cos, cos), dim=-1)[:, 0], torch.cat((sin, sin), dim=-1)[:, 0]
