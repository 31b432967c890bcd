"""The complete input layer: token embedding fused with a position signal.

Shapes: ``b`` batch, ``s`` sequence, ``d`` model width, ``d_p`` position width (concat only).

    h = dropout(norm(fuse(token(ids), position(s, offset))))

``fuse`` adds the two ``(b, s, d)`` signals (Vaswani et al.) or concatenates a ``(b, s, d - d_p)`` token
vector with a ``(s, d_p)`` position vector, so the output width is ``d`` either way. ``norm`` is an optional
LayerNorm (BERT applies one here; the original model does not). Schemes that act inside attention (RoPE, ALiBi,
T5 bias) add nothing at the input: use ``position=None`` and apply them in attention.

Speed (chapter 6): the textbook ``W[ids] * sqrt(d) + pe`` makes three passes over a ``(b, s, d)`` tensor. With
``fusion="add"`` the lookup, the scale and the position add are one fused op,
:meth:`~course_embed.token.TokenEmbedding.lookup_add`: gather into the output, then one in-place add with the scale
folded in (two passes), whose backward sends the gradient to the table only through the looked-up rows.
``compile=True`` hands the same computation to ``torch.compile``, which emits a single loop. Inside a compiled
model (``torch.compile(model)`` of a model holding this layer) the layer traces without a graph break: the ids are
checked in the graph (:func:`~course_embed.checks.check_ids`) and the output is the textbook expression, which
the compiler fuses with what follows. The layer keeps no state between calls: every call reads the tables as they
are.
"""

from __future__ import annotations

import functools
from typing import Literal

import torch
from torch import nn

from .checks import Fixed, check_batch_ids, check_device_dtype, check_ids, check_offset, check_positions, fix
from .learned import LearnedPositionalEmbedding
from .sinusoidal import SinusoidalPositionalEncoding
from .token import Init, TokenEmbedding, lookup_add_reference

POSITIONS = ("sinusoidal", "learned", None)
FUSIONS = ("add", "concat")


class TransformerEmbedding(nn.Module):
    """Token ids ``(b, s)`` to the ``(b, s, d)`` vectors the first Transformer layer sees.

    Args:
        vocab_size: number of token ids.
        d_model: output width ``d``.
        position: ``"sinusoidal"`` (any length), ``"learned"`` (up to ``max_len``) or ``None``.
        fusion: ``"add"`` or ``"concat"``.
        dropout: dropout probability applied last (active in ``train()`` mode only).
        layer_norm: apply ``nn.LayerNorm(d)`` after fusing.
        padding_idx: pad token id (zero row, zero gradient; not an attention mask).
        max_len: positions of the learned table, or initial size of the sinusoidal cache.
        scale: multiply token vectors by ``sqrt`` of their width.
        init: token table init, see :class:`~course_embed.token.TokenEmbedding`.
        base: sinusoidal wavelength base.
        d_position: width ``d_p`` of the position part with ``fusion="concat"`` (default ``d // 2``).
        sparse: sparse gradients for the token table (see :class:`~course_embed.token.TokenEmbedding`).
        compile: compute lookup, scale and position add with ``torch.compile`` (one fused kernel). The first call
            for each input shape compiles (seconds; a C++ compiler on CPU), so pad batches to a few fixed shapes.
            Id checks stay eager. Not combinable with ``sparse``. Inside a compiled model this flag is moot: the
            whole model is traced, the layer included.

    Shapes:
        ``forward(ids, offset)``: ids ``(b, s)`` -> ``(b, s, d)``; positions are ``offset .. offset + s - 1``.

    Example:
        >>> import torch, course_embed as ce
        >>> layer = ce.TransformerEmbedding(vocab_size=100, d_model=32, dropout=0.0)
        >>> ids = torch.tensor([[3, 14, 15, 92]])  # (b, s)
        >>> layer(ids).shape
        torch.Size([1, 4, 32])
        >>> expected = layer.token(ids) + ce.sinusoidal_table(4, 32)  # W[ids] * sqrt(d) + PE
        >>> bool(torch.allclose(layer(ids), expected, atol=1e-5))
        True
    """

    d_model = Fixed()
    position = Fixed()
    fusion = Fixed()

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        position: Literal["sinusoidal", "learned"] | None = "sinusoidal",
        fusion: Literal["add", "concat"] = "add",
        dropout: float = 0.1,
        layer_norm: bool = False,
        padding_idx: int | None = None,
        max_len: int = 512,
        scale: bool = True,
        init: Init | None = None,
        base: float = 10000.0,
        d_position: int | None = None,
        device=None,
        dtype=None,
        sparse: bool = False,
        compile: bool = False,
    ):
        super().__init__()
        check_device_dtype(device, dtype)
        if position not in POSITIONS:
            raise ValueError(
                f"position must be one of {POSITIONS}, got {position!r}; RoPE, ALiBi and T5 bias act "
                f"inside attention, so use position=None for them"
            )
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
        if fusion == "concat" and position is None:
            raise ValueError(
                "fusion='concat' needs a position scheme to concatenate; use fusion='add' with position=None"
            )
        if compile and sparse:
            raise ValueError(
                "compile=True does not support sparse=True (torch.compile has no sparse embedding "
                "gradient); use one or the other"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be a probability in [0, 1), got {dropout}; use 0.0 for no dropout")
        d_position = d_model if fusion == "add" else (d_position or d_model // 2)
        if fusion == "concat" and not 0 < d_position < d_model:
            raise ValueError(
                f"d_position must be in (0, d_model={d_model}) with fusion='concat', got {d_position}; use e.g. "
                f"{d_model // 2} (the default), which leaves d_model - d_position dims to the token vector"
            )
        if fusion == "concat" and position == "sinusoidal" and d_position % 2:
            raise ValueError(
                f"d_position must be even for sinusoidal positions (sin/cos come in pairs), got {d_position}; use "
                f"{d_position - 1} or {d_position + 1}"
            )
        fix(self, d_model=d_model, position=position, fusion=fusion)
        self.compile = compile
        self.token = TokenEmbedding(
            vocab_size,
            d_model if fusion == "add" else d_model - d_position,
            padding_idx,
            scale,
            init,
            device=device,
            dtype=dtype,
            sparse=sparse,
        )
        if position == "sinusoidal":
            self.positions = SinusoidalPositionalEncoding(d_position, max_len, base, device=device)
        elif position == "learned":
            self.positions = LearnedPositionalEmbedding(max_len, d_position, device=device, dtype=dtype)
        else:
            self.positions = None
        self.norm = nn.LayerNorm(d_model, device=device, dtype=dtype) if layer_norm else nn.Identity()
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Embed ids ``(b, s)`` at positions ``offset .. offset + s - 1``; returns ``(b, s, d)``."""
        check_batch_ids(ids)
        b, s = ids.shape
        offset = check_offset(offset)
        if self.positions is None:
            h = self.token(ids)  # (b, s, d): lookup and scale
        else:
            if self.position == "learned":
                check_positions(s, offset, self.positions.max_len, batch=b, name="ids")
            weight = self.token.weight
            pe = self.positions.encoding(s, offset, dtype=weight.dtype, device=weight.device)  # (s, d) or (s, d_p)
            if self.fusion == "add":
                h = self._lookup_add(ids, pe)  # (b, s, d): W[ids] * sqrt(d) + pe, the one fused op
            else:
                h = torch.cat((self.token(ids), pe.expand(b, -1, -1)), dim=-1)  # (b, s, d - d_p) | (b, s, d_p)
        h = self.norm(h)
        return self.dropout(h)

    def _lookup_add(self, ids: torch.Tensor, pe: torch.Tensor) -> torch.Tensor:
        """Lookup, scale and position add: ids ``(b, s)``, pe ``(s, d)`` -> ``(b, s, d)``."""
        if self.compile and not torch.compiler.is_compiling():
            check_ids(ids, self.token.vocab_size)  # eager: the compiled function holds no checks
            token = self.token
            return _compiled_lookup_add()(ids, token.weight, pe, token.multiplier, token.padding_idx)
        return self.token.lookup_add(ids, pe)  # gather, then one in-place add (traced: the textbook expression)

    def extra_repr(self) -> str:
        return f"position={self.position!r}, fusion={self.fusion!r}" + (", compile=True" if self.compile else "")


@functools.cache
def _compiled_lookup_add():
    # built on first use: importing the package must not start the compiler
    return torch.compile(lookup_add_reference, dynamic=False)
