"""Chapter 7, sharding an embedding by rows: FSDP (ZeRO-3) against vocabulary parallelism, by the bytes they send.

Shapes: ``v`` vocabulary rows, ``d`` width, ``n`` tokens a rank looks up per step, ``r`` ranks, ``v_k`` rows held by
rank ``k`` (:func:`course_embed.parallel.shard_range`).

Both schemes keep ``v / r`` rows per rank at rest. Fully sharded data parallelism (FSDP, ZeRO stage 3) is data
parallelism: every rank runs its own micro-batch, so before the lookup an all-gather rebuilds the whole ``(v, d)``
table on every rank, and after the backward a reduce-scatter sums the ranks' whole ``(v, d)`` gradients and leaves
each rank its rows. Vocabulary parallelism (Megatron-LM) is tensor parallelism: the ranks share one batch, each looks
up the ids in its rows, and an all-reduce sums the ``(n, d)`` partial outputs; the table's gradient needs nothing.

The collectives here are rings written with point-to-point sends (``isend``/``recv``), so the bytes each rank sends
can be counted where they are sent: in ``r - 1`` steps a ring all-gather or reduce-scatter sends ``(r - 1) / r`` of
the whole tensor per rank, and an all-reduce (a reduce-scatter, then an all-gather) twice that (Patarasuk and Yuan,
2009). The tests run them in 2 and 3 processes on ``gloo`` and compare the counts with :func:`communication_bytes`.
"""

from __future__ import annotations

from collections import Counter

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .. import parallel
from .summation_order import float64_gradient, zipf_ids


def communication_bytes(vocab_size: int, d_model: int, tokens: int, world_size: int, itemsize: int = 2) -> dict:
    """Bytes one rank sends per step for the embedding, with ring collectives (equal shards assumed).

    ``P = v d itemsize`` (the table), ``A = n d itemsize`` (one rank's looked-up rows). Returns
    ``fsdp_all_gather`` ``(r-1)/r P`` (once in the forward; FSDP with ``reshard_after_forward=True`` sends it again
    before the backward), ``fsdp_reduce_scatter`` ``(r-1)/r P``, ``fsdp_resharded`` (the three) and ``fsdp_kept``
    (the gathered table kept for the backward: two), and ``vocab_parallel`` ``2 (r-1)/r A`` (the forward's all-reduce;
    the backward sends nothing for the table).
    """
    if min(vocab_size, d_model, tokens, world_size, itemsize) < 1:
        raise ValueError(
            f"every size must be a positive integer, got vocab_size={vocab_size}, d_model={d_model}, "
            f"tokens={tokens}, world_size={world_size}, itemsize={itemsize}"
        )
    table, rows = vocab_size * d_model * itemsize, tokens * d_model * itemsize
    share = (world_size - 1) / world_size
    return {
        "fsdp_all_gather": share * table,
        "fsdp_reduce_scatter": share * table,
        "fsdp_resharded": 3 * share * table,
        "fsdp_kept": 2 * share * table,
        "vocab_parallel": 2 * share * rows,
    }


def _pass_right(send: torch.Tensor, recv: torch.Tensor, ledger: Counter, name: str) -> None:
    """Send ``send`` to the next rank while receiving ``recv`` from the previous one; count the bytes sent."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    request = dist.isend(send.contiguous(), (rank + 1) % world_size)
    dist.recv(recv, (rank - 1) % world_size)
    request.wait()
    ledger[name] += send.numel() * send.element_size()


def _sizes(total: int, world_size: int) -> list[int]:
    """The sizes of the ``world_size`` contiguous slices of ``total`` rows (:func:`parallel.shard_range`)."""
    return [end - start for start, end in (parallel.shard_range(total, k, world_size) for k in range(world_size))]


def ring_all_gather(shard: torch.Tensor, sizes: list[int], ledger: Counter, name: str = "all-gather") -> torch.Tensor:
    """Every rank's ``(sizes[k], ...)`` shard concatenated into the whole ``(sum(sizes), ...)`` tensor, on every rank.

    Step ``t`` passes on the shard received at step ``t - 1`` (at step 0, the rank's own): ``r - 1`` sends.
    """
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = [shard if k == rank else shard.new_empty(size, *shard.shape[1:]) for k, size in enumerate(sizes)]
    for step in range(world_size - 1):
        _pass_right(chunks[(rank - step) % world_size], chunks[(rank - step - 1) % world_size], ledger, name)
    return torch.cat(chunks)


def ring_reduce_scatter(whole: torch.Tensor, sizes: list[int], ledger: Counter, name: str = "reduce-scatter"):
    """This rank's slice ``(sizes[rank], ...)`` of the sum over ranks of ``whole`` ``(sum(sizes), ...)``.

    Step ``t`` sends the partial sum of one slice on and adds the one received to the rank's own: after ``r - 1``
    steps slice ``k`` has visited every rank and ends on rank ``k``, as ``own + (received partial sum)``.
    """
    rank, world_size = dist.get_rank(), dist.get_world_size()
    parts = list(whole.split(sizes))
    for step in range(world_size - 1):
        send, recv = (rank - step - 1) % world_size, (rank - step - 2) % world_size
        incoming = torch.empty_like(parts[recv])
        _pass_right(parts[send], incoming, ledger, name)
        parts[recv] = parts[recv] + incoming
    return parts[rank]


def ring_all_reduce(x: torch.Tensor, ledger: Counter, name: str = "all-reduce") -> torch.Tensor:
    """The sum over ranks of ``x`` (any shape): a ring reduce-scatter of its ``r`` slices, then a ring all-gather."""
    world_size = dist.get_world_size()
    flat = x.reshape(-1)
    sizes = _sizes(flat.numel(), world_size)
    return ring_all_gather(ring_reduce_scatter(flat, sizes, ledger, name), sizes, ledger, name).view_as(x)


class _RowShardedLookup(torch.autograd.Function):
    """FSDP-style: all-gather the table, look up; backward: the whole ``(v, d)`` gradient, reduce-scattered."""

    @staticmethod
    def forward(ctx, shard, ids, sizes, ledger):
        ctx.save_for_backward(ids)
        ctx.sizes, ctx.ledger = sizes, ledger
        return F.embedding(ids, ring_all_gather(shard, sizes, ledger))  # the gathered table is freed on return

    @staticmethod
    def backward(ctx, grad):
        (ids,) = ctx.saved_tensors  # a lookup's gradient needs the ids, never the table
        whole = torch.ops.aten.embedding_backward(grad, ids, sum(ctx.sizes), -1, False, False)  # (v, d)
        return ring_reduce_scatter(whole, ctx.sizes, ctx.ledger), None, None, None


def row_sharded_lookup(ids: torch.Tensor, shard: torch.Tensor, vocab_size: int, ledger: Counter) -> torch.Tensor:
    """FSDP-style lookup of this rank's own ids ``(*)`` -> ``(*, d)``; ``shard`` is its ``(v_k, d)`` rows.

    The backward leaves in ``shard.grad`` the sum over ranks of the gradient of these rows. It sends an all-gather
    and a reduce-scatter, two collectives: FSDP with ``reshard_after_forward=True`` all-gathers a third time before
    the backward, because it treats every module alike, although this backward never reads the table.
    """
    world_size = dist.get_world_size()
    sizes = _sizes(vocab_size, world_size)
    return _RowShardedLookup.apply(shard, ids, sizes, ledger)


def vocab_parallel_lookup(ids: torch.Tensor, shard: torch.Tensor, vocab_size: int, ledger: Counter) -> torch.Tensor:
    """Megatron-style lookup of the ids ``(*)`` all ranks share -> ``(*, d)``: mask, look up, zero, ring all-reduce.

    Forward only (its backward is the identity and sends nothing; :class:`course_embed.VocabParallelEmbedding`).
    """
    start, _ = parallel.shard_range(vocab_size, dist.get_rank(), dist.get_world_size())
    return ring_all_reduce(parallel.partial_lookup(ids, shard, start), ledger)


def check_row_sharding(vocab_size: int = 1000, d_model: int = 16, batch: int = 2, seq: int = 32, seed: int = 0):
    """Run both schemes on this rank and compare them with one process (call on every rank of the default group).

    Every rank draws the same float32 table, the ``r`` micro-batches of Zipf-like ids ``(batch, seq)`` (frequent ids
    repeat, so summation orders matter) and their upstream
    gradients from ``seed``; rank ``k`` runs micro-batch ``k`` through :func:`row_sharded_lookup`, and all ranks
    run micro-batch 0 through :func:`vocab_parallel_lookup`. Returns this rank's report: ``fsdp_output_equal``,
    ``fsdp_grad_equal_accumulated`` (its rows equal, bit for bit, one process adding the micro-batches' gradients
    in the ring's order), ``fsdp_grad_max_diff`` against one process looking up all micro-batches at once (another
    summation order) and ``fsdp_grad_max_error`` against float64,
    ``vocab_parallel_output_equal``, the bytes this rank ``sent`` per collective and the ``expected`` bytes from
    :func:`communication_bytes` (float32).
    """
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gen = torch.Generator().manual_seed(seed)
    table = torch.randn(vocab_size, d_model, generator=gen)
    ids = zipf_ids(world_size * batch * seq, vocab_size, generator=gen).view(world_size, batch, seq)  # repeats
    upstream = torch.randn(world_size, batch, seq, d_model, generator=gen)
    start, end = parallel.shard_range(vocab_size, rank, world_size)
    ledger = Counter()
    shard = table[start:end].clone().requires_grad_()
    out = row_sharded_lookup(ids[rank], shard, vocab_size, ledger)
    (out * upstream[rank]).sum().backward()
    # one process, the same sum in the ring's order: this rank's micro-batch, then the others, nearest first
    ring_order = [(rank - i) % world_size for i in range(world_size)]
    backward = torch.ops.aten.embedding_backward
    per_batch = [backward(upstream[k], ids[k], vocab_size, -1, False, False) for k in ring_order]  # (v, d) each
    accumulated = per_batch[-1]
    for grad in reversed(per_batch[:-1]):
        accumulated = grad + accumulated  # own + (received partial sum), as ring_reduce_scatter adds
    whole = backward(upstream.flatten(0, 1), ids.flatten(0, 1), vocab_size, -1, False, False)
    exact = float64_gradient(ids.reshape(-1), upstream.reshape(-1, d_model), vocab_size)
    vp = vocab_parallel_lookup(ids[0], table[start:end], vocab_size, ledger)
    expected = communication_bytes(vocab_size, d_model, batch * seq, world_size, itemsize=4)
    return {
        "rank": rank,
        "fsdp_output_equal": torch.equal(out, F.embedding(ids[rank], table)),
        "fsdp_grad_equal_accumulated": torch.equal(shard.grad, accumulated[start:end]),
        "fsdp_grad_max_diff": (shard.grad - whole[start:end]).abs().max().item(),
        "fsdp_grad_max_error": (shard.grad.double() - exact[start:end]).abs().max().item(),
        "vocab_parallel_output_equal": torch.equal(vp, F.embedding(ids[0], table)),
        "sent": dict(ledger),
        "expected": {
            "all-gather": expected["fsdp_all_gather"],
            "reduce-scatter": expected["fsdp_reduce_scatter"],
            "all-reduce": expected["vocab_parallel"],
        },
    }


def compare_row_sharding(world_size: int = 2, **kwargs) -> list[dict]:
    """Run :func:`check_row_sharding` in ``world_size`` local processes (gloo); returns every rank's report."""
    return parallel.run_in_processes(check_row_sharding, world_size, kwargs)
