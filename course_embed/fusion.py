"""The complete input layer: token embedding fused with a position signal.

Shapes: ``b`` batch, ``s`` sequence, ``d`` model width, ``d_p`` position width (concat only).

    h = dropout(norm(fuse(token(ids), position(s, offset))))

``fuse`` adds the two ``(b, s, d)`` signals (Vaswani et al.) or concatenates a ``(b, s, d - d_p)`` token
vector with a ``(s, d_p)`` position vector, so the output width is ``d`` either way. ``norm`` is an optional
LayerNorm (BERT applies one here; the original model does not). Schemes that act inside attention (RoPE, ALiBi,
T5 bias) add nothing at the input: use ``position=None`` and apply them in attention.

Speed (chapter 6): with ``fusion="add"`` and no autograd graph (``torch.no_grad()``, ``torch.inference_mode()``
or a frozen table) the layer makes **one pass** over memory: the table's storage holds ``max_len`` spare rows
after its ``v`` rows, the position rows are written there once, and one ``F.embedding_bag`` sums, for each token,
``sqrt(d) * W[id] + 1 * P[pos]`` (a bag of two rows with per-sample weights). In float32 and float64 that is the
textbook ``W[ids] * sqrt(d) + pe`` bit for bit (one rounded product, one rounded sum, in the same order); in
bfloat16 and float16 the bag is summed in float32 and rounded once, so it can differ from the textbook's two
roundings by one rounding, towards the exact value. While
training, the lookup, the scale and the position add are fused into two passes
(:meth:`~course_embed.token.TokenEmbedding.lookup_add`: gather, then one in-place add), whose backward sends the
gradient to the table only through the looked-up rows. ``compile=True`` hands the computation to
``torch.compile``, which emits a single loop.

Inside a compiled model (``torch.compile(model)`` of a model holding this layer) the layer traces without a graph
break: the ids are checked in the graph (:func:`~course_embed.checks.check_ids`) and the output is the textbook
expression, which the compiler fuses with what follows; the one-pass and two-pass paths are eager optimisations.
"""

from __future__ import annotations

import functools
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from .checks import check_ids, check_positions
from .learned import LearnedPositionalEmbedding
from .sinusoidal import SinusoidalPositionalEncoding
from .token import Init, TokenEmbedding

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

    The one-pass inference path needs the table's storage to extend ``max_len`` rows past the table (set up here and
    after ``.to()``/``.half()``; ``load_state_dict`` copies in place and keeps it). When it does not (a table
    replaced with ``assign=True``, a sequence longer than ``max_len``), the layer falls back to the two-pass path,
    which gives the same values up to one rounding. The token rows are read from the table itself on every call, so
    any write to it is seen. The position rows are copied into the spare rows when the length, the offset or the
    position table's version counter changes; a write to a learned position table through ``.data`` bypasses the
    version counter and is not seen: write under ``torch.no_grad()`` instead.

    Shapes:
        ``forward(ids, offset)``: ids ``(b, s)`` -> ``(b, s, d)``; positions are ``offset .. offset + s - 1``.
    """

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
            raise ValueError(f"dropout must be a probability in [0, 1), got {dropout}")
        d_position = d_model if fusion == "add" else (d_position or d_model // 2)
        if fusion == "concat" and not 0 < d_position < d_model:
            raise ValueError(f"d_position must be in (0, d_model={d_model}) with fusion='concat', got {d_position}")
        self.d_model, self.position, self.fusion, self.compile = d_model, position, fusion, compile
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
        self._room = max_len if fusion == "add" and position is not None else 0  # spare rows for the one pass
        self._stacked, self._tail_key, self._bag_args = None, None, None
        self._make_room()

    def _make_room(self) -> None:
        """Give the token table a storage of ``v + max_len`` rows; keep a ``(v + max_len, d)`` alias of it.

        The parameter stays the same object of shape ``(v, d)`` (optimizers and tied layers still hold it); its
        data now starts a larger buffer whose spare rows receive the position rows (see :meth:`_one_pass`).
        """
        self._stacked, self._tail_key, self._bag_args = None, None, None
        weight = self.token.weight
        if not self._room or weight.device.type == "meta":
            return
        v, d = weight.shape
        with torch.no_grad():
            buffer = torch.empty(v + self._room, d, device=weight.device, dtype=weight.dtype)
            buffer[:v].copy_(weight)
            weight.data = buffer[:v]
        # an alias built with set_ has its own version counter: writing the spare rows leaves the table's untouched
        self._stacked = torch.empty(0, device=weight.device, dtype=weight.dtype).set_(
            buffer.untyped_storage(), 0, (v + self._room, d), (d, 1)
        )

    def _apply(self, fn, recurse: bool = True):
        # .to(), .half(), .cuda() give the table new storage without the spare rows: make room again
        super()._apply(fn, recurse)
        self._make_room()
        return self

    def _one_pass(self, ids: torch.Tensor) -> torch.Tensor | None:
        """``W[ids] * sqrt(d) + P[offset:offset + s]`` as one ``embedding_bag`` over the stacked rows.

        ids ``(b, s)`` -> ``(b, s, d)``; ``None`` when the table's storage has no spare rows for them. The ids must
        be checked first (an id >= v would read a position row) and the rows written by :meth:`_write_positions`.
        """
        weight, stacked = self.token.weight, self._stacked
        b, s = ids.shape
        if stacked is None or s > self._room or stacked.data_ptr() != weight.data_ptr():
            return None
        key = (b, s, ids.dtype, ids.device)
        if self._bag_args is None or self._bag_args[0] != key:
            v = weight.shape[0]
            positions = torch.arange(v, v + s, device=ids.device, dtype=ids.dtype).expand(b, s)
            factors = torch.tensor([self.token.multiplier, 1.0], device=weight.device, dtype=weight.dtype)
            self._bag_args = (key, positions, factors.expand(b * s, 2))
        _, positions, factors = self._bag_args
        pairs = torch.stack((ids, positions), dim=-1).view(b * s, 2)  # (b s, 2): token row, position row
        out = F.embedding_bag(pairs, stacked, mode="sum", per_sample_weights=factors)  # (b s, d), one pass
        return out.view(b, s, -1)

    def _write_positions(self, offset: int, length: int) -> None:
        """Copy the position rows ``offset .. offset + length - 1`` into the spare rows, unless already there."""
        source = self.positions.table if self.position == "sinusoidal" else self.positions.weight
        try:
            version = source._version
        except RuntimeError:  # an inference tensor has no version counter: copy every time
            version = None
        key = (offset, length, source.data_ptr(), version, self._stacked.data_ptr())
        if version is None or key != self._tail_key:
            v = self.token.weight.shape[0]
            pe = self.positions.encoding(length, offset, dtype=self._stacked.dtype, device=self._stacked.device)
            self._stacked[v : v + length].copy_(pe)
            self._tail_key = key

    def forward(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Embed ids ``(b, s)`` at positions ``offset .. offset + s - 1``; returns ``(b, s, d)``."""
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
            shape = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise ValueError(f"ids must have shape (batch, seq), got {shape}; for one sequence use ids.unsqueeze(0)")
        if self.position == "learned":
            check_positions(ids.shape[1], offset, self.positions.max_len, batch=ids.shape[0], name="ids")
        if self.fusion == "add" and self.positions is not None:
            weight = self.token.weight
            pe = self.positions.encoding(ids.shape[1], offset, dtype=weight.dtype, device=weight.device)  # (s, d)
            graph = torch.is_grad_enabled() and (weight.requires_grad or pe.requires_grad)
            traced = torch.compiler.is_compiling()  # inside a compiled model: lookup_add's traceable path below
            h = None
            if self.compile and not traced:
                check_ids(ids, self.token.vocab_size)
                h = _compiled_lookup_add()(ids, weight, pe, self.token.multiplier, self.token.padding_idx)
            elif not (graph or traced) and self._stacked is not None and ids.shape[1] <= self._room:
                check_ids(ids, self.token.vocab_size)  # needed: an id >= v would read a position row
                with torch.no_grad():
                    self._write_positions(offset, ids.shape[1])
                    h = self._one_pass(ids)  # (b, s, d): one embedding_bag, one pass
            if h is None:
                h = self.token.lookup_add(ids, pe)  # (b, s, d): gather, then one in-place add
        else:
            h = self.token(ids)  # (b, s, d), or (b, s, d - d_p) with concat
            if self.fusion == "concat":
                pe = self.positions.encoding(ids.shape[1], offset, dtype=h.dtype, device=h.device)  # (s, d_p)
                h = torch.cat((h, pe.expand(ids.shape[0], -1, -1)), dim=-1)
        return self.dropout(self.norm(h))

    def extra_repr(self) -> str:
        return f"position={self.position!r}, fusion={self.fusion!r}" + (", compile=True" if self.compile else "")


def lookup_add_reference(
    ids: torch.Tensor, weight: torch.Tensor, pe: torch.Tensor, scale: float, padding_idx: int | None = None
) -> torch.Tensor:
    """The textbook input layer ``W[ids] * scale + pe``.

    ids ``(b, s)``, weight ``(v, d)``, pe ``(s, d)`` -> ``(b, s, d)``.

    Eager, it makes three passes and allocates three ``(b, s, d)`` tensors; ``torch.compile`` turns it into one
    loop that reads each row once and writes each output once (``compile=True``).
    """
    return F.embedding(ids, weight, padding_idx) * scale + pe


@functools.cache
def _compiled_lookup_add():
    # built on first use: importing the package must not start the compiler
    return torch.compile(lookup_add_reference, dynamic=False)
