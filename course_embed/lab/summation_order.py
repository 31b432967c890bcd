"""Chapter 7, the embedding backward's summation order: atomic adds against a sort-based segment sum.

Shapes: ``n`` tokens, ``d`` width, ``v`` vocabulary rows.

The gradient of a lookup ``out = W[ids]`` is a scatter-add: ``dW[k]`` is the sum of ``dout[t]`` over the tokens
``t`` with ``ids[t] == k``. A GPU kernel built on atomic adds lets every thread add its token's row into ``dW`` in
whatever order the threads arrive; float32 addition is not associative, so a row that receives three or more
contributions can round differently from run to run. A deterministic kernel sorts the tokens by id (ties by
position), sums each run of equal ids in that fixed order and writes each row once: the same bits every run,
whatever order the work arrived in. Both are simulated here on the CPU, the arrival order being an explicit
permutation of the tokens. Reference: ``torch.ops.aten.embedding_backward`` (on the CPU it adds each row's tokens in
their order in the batch, so :func:`sorted_gradient` equals it bit for bit) and a float64 scatter-add.
"""

from __future__ import annotations

import torch


def _check(ids, grad, vocab_size, order, padding_idx) -> tuple[torch.Tensor, int | None]:
    """Validate the arguments; return the arrival order ``(n,)`` and the padding index in ``[0, v)`` or ``None``."""
    if ids.dim() != 1 or grad.dim() != 2 or grad.shape[0] != ids.shape[0]:
        raise ValueError(
            f"ids must be (n,) and grad (n, d) with the same n, got ids {tuple(ids.shape)} and grad "
            f"{tuple(grad.shape)}; flatten them first (ids.reshape(-1), grad.reshape(-1, d))"
        )
    if ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < vocab_size:
        raise ValueError(f"ids must lie in [0, vocab_size={vocab_size}), got [{int(ids.min())}, {int(ids.max())}]")
    if padding_idx is not None:
        if not -vocab_size <= padding_idx < vocab_size:
            raise ValueError(f"padding_idx={padding_idx} is outside [-{vocab_size}, {vocab_size}); use None for no pad")
        padding_idx %= vocab_size  # F.embedding's convention: -1 is the last row
    n = ids.shape[0]
    if order is None:
        return torch.arange(n), padding_idx
    if order.shape != (n,) or not torch.equal(order.sort().values, torch.arange(n)):
        raise ValueError(f"order must be a permutation of range({n}) (e.g. torch.randperm({n})), got {order}")
    return order, padding_idx


def scatter_add_gradient(
    ids: torch.Tensor,
    grad: torch.Tensor,
    vocab_size: int,
    order: torch.Tensor | None = None,
    padding_idx: int | None = None,
) -> torch.Tensor:
    """``dW`` ``(v, d)``: every token's row ``grad[t]`` ``(d,)`` added into row ``ids[t]`` in the order ``order``.

    What atomic adds do: one addition per token, in the order the threads arrive (``order``, a permutation of
    ``range(n)``; default: token order). Tokens whose id is ``padding_idx`` add nothing.
    """
    order, pad = _check(ids, grad, vocab_size, order, padding_idx)
    out = grad.new_zeros(vocab_size, grad.shape[1])
    for t in order.tolist():
        k = int(ids[t])
        if k != pad:
            out[k] += grad[t]
    return out


def sorted_gradient(
    ids: torch.Tensor,
    grad: torch.Tensor,
    vocab_size: int,
    order: torch.Tensor | None = None,
    padding_idx: int | None = None,
) -> torch.Tensor:
    """``dW`` ``(v, d)`` from a sort-based segment sum: the result does not depend on ``order``.

    The tokens arrive in ``order``, are sorted by the key ``(id, position)`` (distinct keys, so any sort gives the
    same permutation), and each run of equal ids is summed left to right, all runs at once; each row is written once.
    """
    order, pad = _check(ids, grad, vocab_size, order, padding_idx)
    n = ids.shape[0]
    arrived = ids[order]  # (n,) the ids in arrival order
    by_key = torch.argsort(arrived * n + order)  # sort by id, ties by position in the batch
    positions, sorted_ids = order[by_key], arrived[by_key]  # (n,), (n,)
    rows, counts = torch.unique_consecutive(sorted_ids, return_counts=True)  # (u,), (u,) one run per distinct id
    starts = torch.cumsum(counts, 0) - counts  # (u,) where each run begins
    sums = grad.new_zeros(rows.shape[0], grad.shape[1])  # (u, d)
    for j in range(int(counts.max()) if n else 0):  # the j-th term of every run that has one
        live = counts > j
        sums[live] += grad[positions[starts[live] + j]]
    out = grad.new_zeros(vocab_size, grad.shape[1])
    keep = rows != pad if pad is not None else torch.ones_like(rows, dtype=torch.bool)
    out[rows[keep]] = sums[keep]  # each row written once
    return out


def float64_gradient(ids: torch.Tensor, grad: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The reference ``dW`` ``(v, d)`` in float64: ``grad`` ``(n, d)`` summed into the rows ``ids`` ``(n,)``."""
    return torch.zeros(vocab_size, grad.shape[1], dtype=torch.float64).index_add_(0, ids, grad.double())


def zipf_ids(n: int, vocab_size: int, exponent: float = 1.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """``n`` ids ``(n,)`` drawn with probability proportional to ``1 / (rank + 1) ** exponent`` (Zipf-like text)."""
    weights = 1.0 / torch.arange(1, vocab_size + 1, dtype=torch.float64) ** exponent
    return torch.multinomial(weights, n, replacement=True, generator=generator)


def order_study(
    ids: torch.Tensor, grad: torch.Tensor, vocab_size: int, runs: int = 5, seed: int = 0
) -> list[dict[str, float | int | str]]:
    """Simulate ``runs`` backward passes whose additions arrive in different (seeded) orders.

    Args:
        ids: ``(n,)`` token ids; grad: ``(n, d)`` float32 upstream gradient, the same in every run.

    Returns one dict per group of rows by how many tokens hit them (``hits``: 1, 2, 3-9, 10-99, 100+; empty groups
    left out), with ``rows`` in the group and, for ``scatter`` (atomic-add order) and ``sorted`` (segment sum):
    ``*_rows_differ``, the rows whose bits differ between some two runs; ``*_spread``, the largest difference
    between two runs; ``*_error``, the largest difference from a float64 sum. Differences are relative to the row's
    largest float64 entry (float32's own rounding is 2**-24, about 6e-8, of a value).
    """
    gen = torch.Generator().manual_seed(seed)
    orders = [torch.randperm(ids.shape[0], generator=gen) for _ in range(runs)]
    results = {
        "scatter": torch.stack([scatter_add_gradient(ids, grad, vocab_size, o) for o in orders]),  # (runs, v, d)
        "sorted": torch.stack([sorted_gradient(ids, grad, vocab_size, o) for o in orders]),
    }
    exact = float64_gradient(ids, grad, vocab_size)  # (v, d)
    scale = exact.abs().amax(dim=1).clamp_min(torch.finfo(torch.float64).tiny)[:, None]  # (v, 1)
    hits = torch.bincount(ids, minlength=vocab_size)  # (v,)
    table = []
    for name, low, high in [("1", 1, 1), ("2", 2, 2), ("3-9", 3, 9), ("10-99", 10, 99), ("100+", 100, ids.numel())]:
        group = (hits >= low) & (hits <= high)  # (v,)
        if not group.any():
            continue
        row = {"hits": name, "rows": int(group.sum())}
        for label, runs_t in results.items():
            g = runs_t[:, group].double()  # (runs, rows, d)
            row[f"{label}_rows_differ"] = int((g != g[:1]).any(dim=2).any(dim=0).sum())
            row[f"{label}_spread"] = float(((g - g[:1]).abs() / scale[group]).max())
            row[f"{label}_error"] = float(((g - exact[group]).abs() / scale[group]).max())
        table.append(row)
    return table
