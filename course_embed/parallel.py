"""Vocabulary-parallel embedding: one table sharded by rows across processes (Megatron-LM, Shoeybi et al., 2019).

Shapes: ``b`` batch, ``s`` sequence, ``d`` model width, ``v`` vocabulary, ``r`` ranks (world size), ``v_k`` rows
held by rank ``k``.

Every rank holds a contiguous slice ``[start, end)`` of the ``(v, d)`` table and sees the same ids. It looks up
the ids that fall in its slice, writes zeros for the others, and an all-reduce sums the ``r`` partial results:
exactly one rank contributes each row, the others add zeros, so the sum *is* the unsharded lookup, bit for bit.
In the backward pass each rank's slice receives the gradient of its own rows and nothing else; the all-reduce's
backward is the identity because every rank computes the same loss from the same reduced output.

The code only calls ``torch.distributed``: the tests run it with 2 processes on the ``gloo`` backend on one
machine; on GPUs across nodes the same code runs with the ``nccl`` backend (``torchrun --nnodes N``).
"""

from __future__ import annotations

import socket

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .checks import check_ids


def shard_range(vocab_size: int, rank: int, world_size: int) -> tuple[int, int]:
    """Rows ``[start, end)`` of a ``v``-row table held by ``rank`` of ``world_size``: contiguous, sizes within one.

    The first ``v % r`` ranks hold ``v // r + 1`` rows, the rest ``v // r``.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size), got rank={rank}, world_size={world_size}")
    if vocab_size < world_size:
        raise ValueError(f"vocab_size={vocab_size} is smaller than world_size={world_size}: some ranks would hold no "
                         f"rows; use at most {vocab_size} ranks")
    base, extra = divmod(vocab_size, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (rank < extra)


class _SumOverRanks(torch.autograd.Function):
    """All-reduce (sum) in the forward pass, identity in the backward (Megatron's "reduce from model parallel")."""

    @staticmethod
    def forward(ctx, partial: torch.Tensor, group) -> torch.Tensor:
        ctx.mark_dirty(partial)
        dist.all_reduce(partial, op=dist.ReduceOp.SUM, group=group)  # in place: `partial` is a fresh buffer
        return partial

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, None


class VocabParallelEmbedding(nn.Module):
    """The rows ``[start, end)`` of a ``(v, d)`` embedding on this rank; ``forward`` returns the full lookup.

    Args:
        vocab_size: rows ``v`` of the whole table.
        d_model: width ``d``.
        padding_idx: pad id of the whole table (its row is zero and gets no gradient on the rank that holds it).
        group: the process group to shard over (default: the whole world); it must be initialised.
        device, dtype: of this rank's slice.

    Shapes:
        ``weight``: ``(v_k, d)``, ``v_k = end - start`` (:func:`shard_range`).
        ``forward(ids)``: ids ``(*)``, the same on every rank -> ``(*, d)``, the same on every rank.

    Initialised N(0, 1) like ``nn.Embedding``; :meth:`load_full_` copies this rank's rows from a whole table.
    Reference: ``F.embedding(ids, full_weight)``; the tests check the output and the gathered gradient against it
    for equality, not closeness.
    """

    def __init__(self, vocab_size: int, d_model: int, padding_idx: int | None = None, *, group=None, device=None,
                 dtype=None):
        super().__init__()
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("VocabParallelEmbedding needs torch.distributed: call "
                               "torch.distributed.init_process_group(backend, ...) first (gloo on CPU, nccl on GPUs)")
        if padding_idx is not None and not 0 <= padding_idx < vocab_size:
            raise ValueError(f"padding_idx={padding_idx} is outside the vocabulary [0, {vocab_size})")
        self.group = group
        self.rank, self.world_size = dist.get_rank(group), dist.get_world_size(group)
        self.vocab_size, self.d_model, self.padding_idx = vocab_size, d_model, padding_idx
        self.start, self.end = shard_range(vocab_size, self.rank, self.world_size)
        self.weight = nn.Parameter(torch.empty(self.end - self.start, d_model, device=device, dtype=dtype))
        with torch.no_grad():
            nn.init.normal_(self.weight)
            if self._local_padding_idx is not None:
                self.weight[self._local_padding_idx].zero_()

    @property
    def _local_padding_idx(self) -> int | None:
        inside = self.padding_idx is not None and self.start <= self.padding_idx < self.end
        return self.padding_idx - self.start if inside else None

    @torch.no_grad()
    def load_full_(self, full_weight: torch.Tensor) -> "VocabParallelEmbedding":
        """Copy this rank's rows ``full_weight[start:end]`` from a whole ``(v, d)`` table. Returns ``self``."""
        if tuple(full_weight.shape) != (self.vocab_size, self.d_model):
            raise ValueError(f"full_weight must have shape (vocab_size, d_model) = {(self.vocab_size, self.d_model)}, "
                             f"got {tuple(full_weight.shape)}")
        self.weight.copy_(full_weight[self.start:self.end])
        return self

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Look up ``ids`` ``(*)`` across all ranks; returns ``(*, d)``."""
        check_ids(ids, self.vocab_size)
        outside = (ids < self.start) | (ids >= self.end)  # (*) ids another rank holds
        local = (ids - self.start).masked_fill_(outside, 0)  # any valid local row; its result is zeroed below
        partial = F.embedding(local, self.weight, self._local_padding_idx)  # (*, d)
        partial = partial.masked_fill_(outside.unsqueeze(-1), 0.0)
        return _SumOverRanks.apply(partial, self.group)

    def extra_repr(self) -> str:
        return (f"{self.vocab_size}, {self.d_model}, rows=[{self.start}, {self.end}) on rank {self.rank} of "
                f"{self.world_size}")


def memory_per_rank(vocab_size: int, d_model: int, world_size: int, itemsize: int = 4,
                    optimizer: str = "adam") -> dict[str, int]:
    """Bytes one rank holds for the embedding table when sharded ``world_size`` ways (the largest shard).

    Returns ``weight``, ``grad`` (dense) and ``optimizer`` state (``"adam"``: two moments, ``"sgd"``: none) in
    the same dtype, and their ``total``.
    """
    states = {"adam": 2, "sgd": 0}
    if optimizer not in states:
        raise ValueError(f"optimizer must be one of {tuple(states)}, got {optimizer!r}")
    start, end = shard_range(vocab_size, 0, world_size)  # rank 0 holds the largest shard
    weight = (end - start) * d_model * itemsize
    parts = {"weight": weight, "grad": weight, "optimizer": states[optimizer] * weight}
    parts["total"] = sum(parts.values())
    return parts


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a local process group's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _compare_worker(rank: int, world_size: int, port: int, shape: tuple[int, int, int, int], padding_idx, seed: int,
                    results) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        batch, seq, vocab_size, d_model = shape
        gen = torch.Generator().manual_seed(seed)  # every rank draws the same table, ids and upstream gradient
        full = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        with torch.no_grad():
            full.weight.copy_(torch.randn(vocab_size, d_model, generator=gen))
            if padding_idx is not None:
                full.weight[padding_idx].zero_()
        ids = torch.randint(0, vocab_size, (batch, seq), generator=gen)
        if padding_idx is not None:
            ids[:, -2:] = padding_idx  # padded sequences: the pad row must stay zero and get no gradient
        upstream = torch.randn(batch, seq, d_model, generator=gen)
        sharded = VocabParallelEmbedding(vocab_size, d_model, padding_idx).load_full_(full.weight)

        out = sharded(ids)
        (out * upstream).sum().backward()
        expected = full(ids)
        (expected * upstream).sum().backward()

        ranges = [shard_range(vocab_size, k, world_size) for k in range(world_size)]
        most = max(end - start for start, end in ranges)  # all_gather needs equal sizes: pad, gather, trim
        padded = [torch.empty(most, d_model) for _ in ranges]
        dist.all_gather(padded, F.pad(sharded.weight.grad, (0, 0, 0, most - sharded.weight.shape[0])))
        grads = [g[:end - start] for g, (start, end) in zip(padded, ranges)]
        gathered = torch.cat(grads)
        if rank == 0:
            results.put({
                "output_equal": torch.equal(out, expected),
                "grad_equal": torch.equal(gathered, full.weight.grad),
                "max_output_diff": (out - expected).abs().max().item(),
                "max_grad_diff": (gathered - full.weight.grad).abs().max().item(),
                "rows_per_rank": [g.shape[0] for g in grads],
            })
    finally:
        dist.destroy_process_group()


def compare_with_unsharded(world_size: int = 2, batch: int = 4, seq: int = 32, vocab_size: int = 1000,
                           d_model: int = 64, padding_idx: int | None = 0, seed: int = 0) -> dict:
    """Run :class:`VocabParallelEmbedding` in ``world_size`` local processes (gloo) against ``nn.Embedding``.

    Returns rank 0's report: ``output_equal`` and ``grad_equal`` (exact equality of the forward output and of the
    gradient gathered from all shards), the largest absolute differences, and ``rows_per_rank``.
    """
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.start_processes(_compare_worker, args=(world_size, free_port(), (batch, seq, vocab_size, d_model), padding_idx,
                                              seed, results), nprocs=world_size, start_method="spawn")
    return results.get()
