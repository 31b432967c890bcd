"""A one-pass eager input layer, kept in the lab as a measured demonstration (chapter 6).

Shapes: ``b`` batch, ``s`` sequence, ``v`` vocabulary size, ``d`` model width.

The textbook ``W[ids] * sqrt(d) + P[:s]`` makes three passes over a ``(b, s, d)`` tensor; the package's
``TransformerEmbedding`` makes two (:meth:`~course_embed.token.TokenEmbedding.lookup_add`: gather, then one in-place
add). Eager PyTorch has one operator that reads two rows and writes one, ``F.embedding_bag`` with per-sample
weights, so one pass is possible: stack the position rows under the table and make each token a bag of two rows,
its token row (weight ``sqrt(d)``) and its position row (weight 1). In float32 and float64 that equals the textbook
bit for bit (one rounded product, one rounded sum, in the same order).

Copying the table on every call would cost more than it saves, so :class:`OnePassEmbedding` allocates the table's
storage with ``max_len`` spare rows after its ``v`` rows and writes the position rows there. That is why it is not
in the library. Its costs, each shown by a function below and in chapter 6:

* the state dict is larger than the table: ``torch.save`` writes the whole storage, spare rows included
  (:func:`saved_bytes`);
* the position rows are copied only when the length, the offset or the position table's version counter changes,
  so a write through ``.data`` (which bypasses the counter) leaves stale rows (:func:`stale_after_data_write`);
* ``forward`` writes into module storage, so one module serving different lengths from several threads at once
  can read another call's position rows (:func:`forward_writes_storage`).

With an autograd graph it takes the package's two-pass path (the one-pass trick would send the table's gradient
to the stacked storage).
"""

from __future__ import annotations

import io
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from course_embed.checks import check_ids
from course_embed.learned import LearnedPositionalEmbedding
from course_embed.sinusoidal import SinusoidalPositionalEncoding
from course_embed.token import TokenEmbedding


class OnePassEmbedding(nn.Module):
    """``W[ids] * sqrt(d) + P[offset:offset + s]`` as one ``embedding_bag`` over stacked rows (no graph).

    Args:
        vocab_size: number of token ids ``v``.
        d_model: width ``d``.
        position: ``"sinusoidal"`` or ``"learned"``.
        max_len: spare rows after the table: the longest sequence the one-pass path serves.
        device, dtype: of the tables.

    Shapes:
        ``forward(ids, offset)``: ids ``(b, s)`` -> ``(b, s, d)``; positions ``offset .. offset + s - 1``.

    Reference: the textbook ``F.embedding(ids, W) * sqrt(d) + pe`` (the tests compare bit for bit).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        position: Literal["sinusoidal", "learned"] = "sinusoidal",
        max_len: int = 512,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if position not in ("sinusoidal", "learned"):
            raise ValueError(f"position must be 'sinusoidal' or 'learned', got {position!r}")
        if max_len < 1:
            raise ValueError(f"max_len must be a positive integer, got {max_len}")
        self.position, self.max_len = position, max_len
        self.token = TokenEmbedding(vocab_size, d_model, device=device, dtype=dtype)
        if position == "sinusoidal":
            self.positions = SinusoidalPositionalEncoding(d_model, max_len, device=device)
        else:
            self.positions = LearnedPositionalEmbedding(max_len, d_model, device=device, dtype=dtype)
        self._make_room()

    def _make_room(self) -> None:
        """Give the token table a storage of ``v + max_len`` rows and keep a ``(v + max_len, d)`` alias of it.

        The parameter stays the same ``(v, d)`` object (optimizers and tied layers still hold it); its data now
        starts a larger buffer whose spare rows receive the position rows.
        """
        self._tail_key, self._bag_args = None, None
        weight = self.token.weight
        v, d = weight.shape
        with torch.no_grad():
            buffer = torch.empty(v + self.max_len, d, device=weight.device, dtype=weight.dtype)
            buffer[:v].copy_(weight)
            buffer[v:].fill_(float("nan"))  # spare rows read as NaN until written, never as a freed buffer's bytes
            weight.data = buffer[:v]
        # an alias built with set_ has its own version counter: writing the spare rows leaves the table's untouched
        self._stacked = torch.empty(0, device=weight.device, dtype=weight.dtype).set_(
            buffer.untyped_storage(), 0, (v + self.max_len, d), (d, 1)
        )

    def _apply(self, fn, recurse: bool = True):
        # .to(), .double(), .cuda() give the table new storage without the spare rows: make room again
        super()._apply(fn, recurse)
        self._make_room()
        return self

    def _write_positions(self, offset: int, length: int) -> None:
        """Copy position rows ``offset .. offset + length - 1`` into the spare rows unless they are there already."""
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

    def _one_pass(self, ids: torch.Tensor) -> torch.Tensor:
        """ids ``(b, s)`` -> ``(b, s, d)``: one ``embedding_bag`` of two-row bags (token row, position row)."""
        weight = self.token.weight
        b, s = ids.shape
        key = (b, s, ids.dtype, ids.device)
        if self._bag_args is None or self._bag_args[0] != key:
            v = weight.shape[0]
            positions = torch.arange(v, v + s, device=ids.device, dtype=ids.dtype).expand(b, s)
            factors = torch.tensor([self.token.multiplier, 1.0], device=weight.device, dtype=weight.dtype)
            self._bag_args = (key, positions, factors.expand(b * s, 2))
        _, positions, factors = self._bag_args
        pairs = torch.stack((ids, positions), dim=-1).view(b * s, 2)  # (b s, 2)
        return F.embedding_bag(pairs, self._stacked, mode="sum", per_sample_weights=factors).view(b, s, -1)

    def forward(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Embed ids ``(b, s)`` at positions ``offset .. offset + s - 1``; returns ``(b, s, d)``."""
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
            shape = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise ValueError(f"ids must have shape (batch, seq), got {shape}; for one sequence use ids.unsqueeze(0)")
        check_ids(ids, self.token.vocab_size)  # needed: an id >= v would read a position row
        weight = self.token.weight
        pe = self.positions.encoding(ids.shape[1], offset, dtype=weight.dtype, device=weight.device)  # (s, d)
        graph = torch.is_grad_enabled() and (weight.requires_grad or pe.requires_grad)
        room = self._stacked.data_ptr() == weight.data_ptr() and ids.shape[1] <= self.max_len
        if graph or not room:  # no graph allowed, and the stacked storage must still be the table's
            return self.token.lookup_add(ids, pe)  # the package's two passes: gather, one in-place add
        with torch.no_grad():
            self._write_positions(offset, ids.shape[1])
            return self._one_pass(ids)


def storage_rows(module: OnePassEmbedding) -> int:
    """Rows of ``d`` values held by the token table's storage: ``v + max_len``."""
    weight = module.token.weight
    return weight.untyped_storage().nbytes() // (weight.element_size() * weight.shape[1])


def saved_bytes(module: nn.Module) -> int:
    """Bytes ``torch.save(module.state_dict())`` writes (it serialises each tensor's whole storage)."""
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    return buffer.getbuffer().nbytes


def stale_after_data_write(module: OnePassEmbedding, ids: torch.Tensor, factor: float = 2.0) -> float:
    """Scale a learned position table through ``.data`` and return ``max |one pass - textbook|`` afterwards.

    ids ``(b, s)``. A write through ``.data`` does not bump the version counter, so the spare rows keep the old
    position rows and the one-pass output is stale; the same write under ``torch.no_grad()`` would be seen.
    """
    if module.position != "learned":
        raise ValueError("stale_after_data_write needs position='learned' (a sinusoidal table is never written)")
    with torch.no_grad():
        module(ids)  # the spare rows now hold the current position rows
        module.positions.weight.data.mul_(factor)
        stale = module(ids)
        fresh = F.embedding(ids, module.token.weight) * module.token.multiplier
        fresh = fresh + module.positions.encoding(ids.shape[1], 0, dtype=fresh.dtype)
    return (stale - fresh).abs().max().item()


def forward_writes_storage(module: OnePassEmbedding, ids: torch.Tensor, offset: int) -> bool:
    """Whether a no-grad ``forward(ids, offset)`` changed the bytes of the table's storage (its spare rows).

    ids ``(b, s)``. Each call at a new length or offset rewrites the spare rows: module state written by a forward.
    """
    before = module._stacked.view(torch.uint8).clone()  # bytes: unwritten rows hold NaN, which equals nothing
    with torch.no_grad():
        module(ids, offset=offset)
    return not torch.equal(before, module._stacked.view(torch.uint8))
