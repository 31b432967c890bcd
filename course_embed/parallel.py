"""Vocabulary-parallel embedding: one table sharded by rows across processes (Megatron-LM, Shoeybi et al., 2019).

Shapes: ``b`` batch, ``s`` sequence, ``d`` model width, ``v`` vocabulary, ``r`` ranks (world size), ``v_k`` rows
held by rank ``k``.

Every rank holds a contiguous slice ``[start, end)`` of the ``(v, d)`` table and sees the same ids. It looks up
the ids that fall in its slice, writes zeros for the others, and an all-reduce sums the ``r`` partial results:
exactly one rank contributes each row, the others add zeros, so the sum *is* the unsharded lookup, bit for bit.
In the backward pass each rank's slice receives the gradient of its own rows and nothing else; the all-reduce's
backward is the identity because every rank computes the same loss from the same reduced output.

The same sharding serves the output side (:func:`vocab_parallel_cross_entropy`): with the LM head's ``(v, d)``
weight split by rows, rank ``k`` computes only its ``(n, v_k)`` slice of the logits, and the softmax
cross-entropy needs three all-reduces of ``n`` numbers each (the row maximum, the target's logit, the sum of
exponentials) instead of the ``(n, v)`` logits on one device.

The code only calls ``torch.distributed``: the tests run it with 2 processes on the ``gloo`` backend on one
machine; on GPUs across nodes the same code runs with the ``nccl`` backend (``torchrun --nnodes N``).
"""

from __future__ import annotations

import socket

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .checks import check_device_dtype, check_ids


def shard_range(vocab_size: int, rank: int, world_size: int) -> tuple[int, int]:
    """Rows ``[start, end)`` of a ``v``-row table held by ``rank`` of ``world_size``: contiguous, sizes within one.

    The first ``v % r`` ranks hold ``v // r + 1`` rows, the rest ``v // r``.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(
            f"rank must be in [0, world_size), got rank={rank}, world_size={world_size}; pass "
            f"torch.distributed.get_rank() and get_world_size() of the process group"
        )
    if vocab_size < world_size:
        raise ValueError(
            f"vocab_size={vocab_size} is smaller than world_size={world_size}: some ranks would hold no "
            f"rows; use at most {vocab_size} ranks"
        )
    base, extra = divmod(vocab_size, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (rank < extra)


def _check_group(caller: str) -> None:
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            f"{caller} needs torch.distributed: call torch.distributed.init_process_group(backend, ...) first "
            f"(gloo on CPU, nccl on GPUs)"
        )


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
        * ``weight``: ``(v_k, d)``, ``v_k = end - start`` (``course_embed.parallel.shard_range``).
        * ``forward(ids)``: ids ``(*)``, the same on every rank -> ``(*, d)``, the same on every rank.

    Initialised N(0, 1) like ``nn.Embedding``; :meth:`load_full_` copies this rank's rows from a whole table.
    Reference: ``F.embedding(ids, full_weight)``; the tests check the output and the gathered gradient against it
    for equality, not closeness.

    Example:
        A process group of one (``torchrun --nproc-per-node 2`` starts two, each holding half the rows):

        >>> import torch, torch.distributed as dist, course_embed as ce
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> emb = ce.VocabParallelEmbedding(vocab_size=10, d_model=4)
        >>> emb.weight.shape  # (v_k, d): all 10 rows on the only rank
        torch.Size([10, 4])
        >>> emb(torch.tensor([[1, 9, 3]])).shape  # (b, s) -> (b, s, d)
        torch.Size([1, 3, 4])
        >>> dist.destroy_process_group()
    """

    def __init__(
        self, vocab_size: int, d_model: int, padding_idx: int | None = None, *, group=None, device=None, dtype=None
    ):
        super().__init__()
        check_device_dtype(device, dtype)
        _check_group("VocabParallelEmbedding")
        if padding_idx is not None and not 0 <= padding_idx < vocab_size:
            raise ValueError(
                f"padding_idx={padding_idx} is outside the vocabulary [0, {vocab_size}); use an id in that range "
                f"(e.g. 0), or None for no pad token"
            )
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
    def load_full_(self, full_weight: torch.Tensor) -> VocabParallelEmbedding:
        """Copy this rank's rows ``full_weight[start:end]`` from a whole ``(v, d)`` table. Returns ``self``."""
        if tuple(full_weight.shape) != (self.vocab_size, self.d_model):
            raise ValueError(
                f"full_weight must have shape (vocab_size, d_model) = {(self.vocab_size, self.d_model)}, "
                f"got {tuple(full_weight.shape)}; pass the whole unsharded table, the same on every rank"
            )
        self.weight.copy_(full_weight[self.start : self.end])
        return self

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Look up ``ids`` ``(*)`` across all ranks; returns ``(*, d)``."""
        check_ids(ids, self.vocab_size)
        partial = partial_lookup(ids, self.weight, self.start, self._local_padding_idx)  # (*, d)
        return _SumOverRanks.apply(partial, self.group)

    def extra_repr(self) -> str:
        return (
            f"{self.vocab_size}, {self.d_model}, rows=[{self.start}, {self.end}) on rank {self.rank} of "
            f"{self.world_size}"
        )


class _CopyToRanks(torch.autograd.Function):
    """Identity in the forward pass, all-reduce (sum) of the gradient in the backward (Megatron's "copy to model
    parallel"): a replicated input ``h`` feeds every rank's shard, so its gradient is the sum of the shards'."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad, None


def partial_lookup(ids: torch.Tensor, shard: torch.Tensor, start: int, padding_idx: int | None = None) -> torch.Tensor:
    """One rank's part of a vocabulary-parallel lookup: ids ``(*)`` -> ``(*, d)``.

    ``shard`` ``(v_k, d)`` holds the rows ``[start, start + v_k)``; ids in that range get their row, every other id
    a row of zeros, so summing the ranks' parts gives the unsharded lookup. ``padding_idx`` is local to the shard.
    """
    check_ids(ids, torch.iinfo(torch.int64).max)  # integer ids; other ranks hold the ids past this shard
    if padding_idx is not None and not 0 <= padding_idx < shard.shape[0]:
        raise ValueError(
            f"padding_idx={padding_idx} is outside this shard's local rows [0, {shard.shape[0]}); pass the pad id "
            f"minus start on the rank that holds it, and None on the others"
        )
    outside = (ids < start) | (ids >= start + shard.shape[0])  # (*) ids another rank holds
    local = (ids - start).masked_fill_(outside, 0)  # any valid local row; its result is zeroed below
    return F.embedding(local, shard, padding_idx).masked_fill_(outside.unsqueeze(-1), 0.0)


def copy_to_ranks(x: torch.Tensor, group=None) -> torch.Tensor:
    """``x`` unchanged; in the backward pass its gradient is summed over the ranks. Use it on the hidden states
    ``(*, d)`` that enter a vocabulary-parallel LM head."""
    return _CopyToRanks.apply(x, group)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Softmax cross-entropy over logits split by vocabulary: ``(n, v_k)`` per rank, targets ``(n,)`` global."""

    @staticmethod
    def forward(ctx, logits, targets, start: int, group):
        row_max = logits.max(dim=-1).values  # (n,) this shard's maximum
        dist.all_reduce(row_max, op=dist.ReduceOp.MAX, group=group)  # the global maximum: exact
        shifted = logits - row_max.unsqueeze(-1)  # (n, v_k)
        outside = (targets < start) | (targets >= start + logits.shape[-1])  # (n,) targets another rank holds
        local = (targets - start).masked_fill(outside, 0)
        target_logit = shifted.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        dist.all_reduce(target_logit, op=dist.ReduceOp.SUM, group=group)  # one rank contributes: exact
        exp = shifted.exp()
        sum_exp = exp.sum(dim=-1)
        dist.all_reduce(sum_exp, op=dist.ReduceOp.SUM, group=group)  # a sum of r partial sums: rounding differs
        ctx.save_for_backward(exp.div_(sum_exp.unsqueeze(-1)), local, outside)  # this shard's softmax
        return sum_exp.log() - target_logit  # (n,) per-token loss

    @staticmethod
    def backward(ctx, grad):
        softmax, local, outside = ctx.saved_tensors
        grad_logits = softmax  # d loss_i / d logit_ij = softmax_ij - [j is the target], on this shard only
        rows = torch.arange(softmax.shape[0], device=softmax.device)
        grad_logits[rows, local] -= (~outside).to(softmax.dtype)
        return grad_logits.mul_(grad.unsqueeze(-1)), None, None, None


def vocab_parallel_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, vocab_size: int, *, group=None, reduction: str = "mean"
) -> torch.Tensor:
    """Cross-entropy of logits sharded by vocabulary rows across ranks (Megatron-LM's ``vocab_parallel_cross_entropy``).

    Args:
        logits: this rank's slice ``(*, v_k)`` of the logits, columns ``[start, end)`` of :func:`shard_range`.
        targets: target ids ``(*)`` in ``[0, vocab_size)``, the same on every rank.
        vocab_size: ``v``, the whole vocabulary.
        group: the process group (default: the whole world).
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` (per-token losses ``(*)``).

    Returns:
        The same loss on every rank. Reference: ``F.cross_entropy`` on the gathered ``(*, v)`` logits; the maximum
        and the target's logit are reduced exactly, the sum of exponentials is a sum of ``r`` partial sums, so
        the loss and gradients agree to round-off (tests: float64, 2 processes).
    """
    _check_group("vocab_parallel_cross_entropy")
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    start, end = shard_range(vocab_size, rank, world_size)
    if logits.shape[-1] != end - start:
        raise ValueError(
            f"logits has {logits.shape[-1]} columns, but rank {rank} of {world_size} holds the "
            f"{end - start} vocabulary rows [{start}, {end}) of vocab_size={vocab_size}; pass this rank's slice "
            f"of the logits, e.g. full_logits[..., {start}:{end}]"
        )
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be one of ('mean', 'sum', 'none'), got {reduction!r}")
    check_ids(targets, vocab_size, "targets")
    loss = _VocabParallelCrossEntropy.apply(logits.reshape(-1, end - start), targets.reshape(-1), start, group)
    if reduction == "none":
        return loss.view(targets.shape)
    return loss.mean() if reduction == "mean" else loss.sum()


def memory_per_rank(
    vocab_size: int, d_model: int, world_size: int, itemsize: int = 4, optimizer: str = "adam"
) -> dict[str, int]:
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


def _gather_rows(local: torch.Tensor, vocab_size: int, group=None) -> torch.Tensor:
    """Concatenate every rank's ``(v_k, ...)`` slice into the whole ``(v, ...)`` tensor (all ranks get it)."""
    world_size = dist.get_world_size(group)
    ranges = [shard_range(vocab_size, k, world_size) for k in range(world_size)]
    most = max(end - start for start, end in ranges)  # all_gather needs equal sizes: pad, gather, trim
    pad = [0, 0] * (local.dim() - 1) + [0, most - local.shape[0]]
    padded = [torch.empty(most, *local.shape[1:], dtype=local.dtype, device=local.device) for _ in ranges]
    dist.all_gather(padded, F.pad(local, pad), group=group)
    return torch.cat([g[: end - start] for g, (start, end) in zip(padded, ranges, strict=False)])


def check_against_unsharded(
    batch: int = 4,
    seq: int = 32,
    vocab_size: int = 1000,
    d_model: int = 64,
    padding_idx: int | None = 0,
    seed: int = 0,
    group=None,
) -> dict:
    """Compare the sharded embedding and cross-entropy with their one-process versions (call on every rank).

    Every rank draws the same table, ids, targets and upstream gradient from ``seed``. Returns, on every rank:
    ``output_equal``/``grad_equal`` (embedding forward and gathered table gradient, exact equality) with their
    largest differences, ``rows_per_rank``, and for the vocabulary-parallel cross-entropy in float64 and float32
    (head ``(v, d)`` sharded by rows, hidden states ``(b s, d)`` replicated): the largest differences of the loss,
    of the hidden states' gradient and of the gathered head gradient against ``F.cross_entropy``.
    """
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    gen = torch.Generator().manual_seed(seed)  # every rank draws the same numbers
    full = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
    with torch.no_grad():
        full.weight.copy_(torch.randn(vocab_size, d_model, generator=gen))
        if padding_idx is not None:
            full.weight[padding_idx].zero_()
    ids = torch.randint(0, vocab_size, (batch, seq), generator=gen)
    if padding_idx is not None:
        ids[:, -2:] = padding_idx  # padded sequences: the pad row must stay zero and get no gradient
    upstream = torch.randn(batch, seq, d_model, generator=gen)
    sharded = VocabParallelEmbedding(vocab_size, d_model, padding_idx, group=group).load_full_(full.weight)
    out = sharded(ids)
    (out * upstream).sum().backward()
    expected = full(ids)
    (expected * upstream).sum().backward()
    gathered = _gather_rows(sharded.weight.grad, vocab_size, group)
    report = {
        "output_equal": torch.equal(out, expected),
        "grad_equal": torch.equal(gathered, full.weight.grad),
        "max_output_diff": (out - expected).abs().max().item(),
        "max_grad_diff": (gathered - full.weight.grad).abs().max().item(),
        "rows_per_rank": [
            end - start for start, end in (shard_range(vocab_size, k, world_size) for k in range(world_size))
        ],
    }
    hidden, targets = (
        torch.randn(batch * seq, d_model, generator=gen),
        torch.randint(0, vocab_size, (batch * seq,), generator=gen),
    )
    head = torch.randn(vocab_size, d_model, generator=gen) * d_model**-0.5
    start, end = shard_range(vocab_size, rank, world_size)
    for dtype in (torch.float64, torch.float32):
        h1, w1 = (t.to(dtype, copy=True).requires_grad_() for t in (hidden, head))
        loss1 = F.cross_entropy(h1 @ w1.T, targets)
        loss1.backward()
        h2, w2 = (t.to(dtype, copy=True).requires_grad_() for t in (hidden, head[start:end]))
        loss2 = vocab_parallel_cross_entropy(copy_to_ranks(h2, group) @ w2.T, targets, vocab_size, group=group)
        loss2.backward()
        name = str(dtype).removeprefix("torch.")
        report[f"ce_{name}"] = {
            "loss": loss1.item(),
            "loss_diff": abs(loss2.item() - loss1.item()),
            "hidden_grad_diff": (h2.grad - h1.grad).abs().max().item(),
            "head_grad_diff": (_gather_rows(w2.grad, vocab_size, group) - w1.grad).abs().max().item(),
        }
    return report


def _spawned(rank: int, fn, world_size: int, port: int, kwargs: dict, results) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        results.put((rank, fn(**kwargs)))
    finally:
        dist.destroy_process_group()


def run_in_processes(fn, world_size: int, kwargs: dict) -> list:
    """Call ``fn(**kwargs)`` on every rank of a ``world_size``-process gloo group on this machine; return each rank's
    result, in rank order. ``fn`` must be a module-level function (the processes are spawned and import it)."""
    import torch.multiprocessing as mp

    results = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(
        _spawned, args=(fn, world_size, free_port(), kwargs, results), nprocs=world_size, start_method="spawn"
    )
    return [result for _, result in sorted(results.get() for _ in range(world_size))]


def compare_with_unsharded(
    world_size: int = 2,
    batch: int = 4,
    seq: int = 32,
    vocab_size: int = 1000,
    d_model: int = 64,
    padding_idx: int | None = 0,
    seed: int = 0,
) -> dict:
    """Run :func:`check_against_unsharded` in ``world_size`` local processes (gloo); return rank 0's report."""
    kwargs = {
        "batch": batch,
        "seq": seq,
        "vocab_size": vocab_size,
        "d_model": d_model,
        "padding_idx": padding_idx,
        "seed": seed,
    }
    return run_in_processes(check_against_unsharded, world_size, kwargs)[0]
