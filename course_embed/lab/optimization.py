"""Chapter 6, optimisation: precision errors, lost updates, the dict-cache and checkpointing anti-patterns, autocast,
EmbeddingBag, and the speed-up figure of the benchmark tables (the roofline is in :mod:`.roofline`, the training
step in :mod:`.profile_step`).

Shapes: ``v`` vocabulary size, ``d`` model width.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch

from . import bench
from .fusion import max_abs_difference


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> dict[str, float]:
    """Error of ``approx`` against ``exact`` (same shape), relative to the RMS of ``exact``, computed in float64.

    ``rms`` is ``rms(approx - exact) / rms(exact)``; ``max`` is ``max |approx - exact| / rms(exact)``.
    """
    a, e = approx.detach().double(), exact.detach().double()
    if a.shape != e.shape:
        raise ValueError(f"approx and exact must have the same shape, got {tuple(a.shape)} and {tuple(e.shape)}")
    scale = e.square().mean().sqrt()
    diff = a - e
    return {"rms": (diff.square().mean().sqrt() / scale).item(), "max": (diff.abs().max() / scale).item()}


def lost_update_fraction(weight: torch.Tensor, step: float, dtype: torch.dtype) -> float:
    """Fraction of weights stored in ``dtype`` that an update of ``+step`` leaves unchanged.

    Round-to-nearest drops an update smaller than half the spacing of ``dtype`` around the weight: in bfloat16
    (8 significant bits) a step of ``1e-4`` is lost on every weight with ``|w| >= 2**-5``. This is why mixed
    precision keeps a float32 master copy of the weights.
    """
    stored = weight.detach().to(dtype)
    updated = (stored.double() + step).to(dtype)  # exact sum, rounded once to the storage dtype
    return (updated == stored).double().mean().item()


class DictCacheEmbedding:
    """An anti-pattern, kept to be measured: a Python dict of rows in front of an embedding.

    ``__call__(ids)`` looks each id up in ``cache`` and calls the embedding for the ones it has not seen, one id
    at a time. It is slower than the lookup it wraps (a dict access and a tensor per token against one gather for
    the batch) and it returns stale rows once the table is trained: the cache holds copies.

    Shapes: ids ``(b, s)`` -> ``(b, s, d)``.
    """

    def __init__(self, embedding: torch.nn.Module):
        self.embedding, self.cache = embedding, {}

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        rows = []
        for i in ids.flatten().tolist():
            if i not in self.cache:
                self.cache[i] = self.embedding(torch.tensor(i, device=ids.device))  # (d,), a copy of row i
            rows.append(self.cache[i])
        return torch.stack(rows).unflatten(0, ids.shape)


def checkpoint_report(embedding: torch.nn.Module, ids: torch.Tensor) -> dict:
    """What gradient checkpointing does to an embedding lookup ``embedding(ids)``, ids ``(b, s)``.

    Returns ``output_bytes`` (the ``(b, s, d)`` activations people expect to save), ``saved_bytes`` (what autograd
    keeps for the lookup's backward: only the ids, which checkpointing keeps too, to recompute), and for each way
    of calling ``torch.utils.checkpoint.checkpoint`` (``"default"``: no ``use_reentrant``; ``"reentrant"``;
    ``"non-reentrant"``): whether the output requires grad, whether ``out.sum().backward()`` gave the table a
    gradient, and the warnings raised.
    """
    import warnings

    from torch.utils.checkpoint import checkpoint

    report = {
        "output_bytes": bench.tensor_bytes(embedding(ids)),
        "saved_bytes": bench.saved_tensor_bytes(lambda: embedding(ids)),
    }
    for mode, kwargs in (
        ("default", {}),
        ("reentrant", {"use_reentrant": True}),
        ("non-reentrant", {"use_reentrant": False}),
    ):
        embedding.zero_grad(set_to_none=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = checkpoint(embedding, ids, **kwargs)
            if out.requires_grad:
                out.sum().backward()
        report[mode] = {
            "requires_grad": out.requires_grad,
            "weight_grad": embedding.weight.grad is not None,
            "warnings": sorted({str(w.message) for w in caught}),
        }
    embedding.zero_grad(set_to_none=True)
    return report


def autocast_dtypes(device_type: str = "cpu", dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.dtype]:
    """Output dtypes under ``torch.autocast(device_type, dtype)``: an embedding lookup stays float32, a linear
    layer runs in ``dtype``. Autocast changes the dtype of matrix multiplications, not of a gather."""
    emb, linear = torch.nn.Embedding(10, 8), torch.nn.Linear(8, 8)
    emb, linear = emb.to(device_type), linear.to(device_type)
    ids = torch.arange(4, device=device_type)[None]
    with torch.autocast(device_type, dtype=dtype):
        looked_up = emb(ids)
        projected = linear(looked_up)
    return {"embedding": looked_up.dtype, "linear": projected.dtype}


def embedding_bag_report(weight: torch.Tensor, ids: torch.Tensor) -> dict:
    """``nn.EmbeddingBag(mode="mean")`` on ids ``(b, s)`` against the lookup ``(b, s, d)``.

    Returns both output shapes and ``max |bag - lookup.mean(1)|``: a bag is one pooled vector per sequence, so
    it cannot replace a per-token lookup (and it is not a faster one).
    """
    bag = torch.nn.functional.embedding_bag(ids, weight, mode="mean")  # (b, d)
    lookup = torch.nn.functional.embedding(ids, weight)  # (b, s, d)
    return {
        "bag_shape": tuple(bag.shape),
        "lookup_shape": tuple(lookup.shape),
        "max_diff_to_mean": max_abs_difference(bag, lookup.mean(1)),
    }


def speedup_plot(tables, *, baseline_label: str | None = None):
    """Speed-up over each table's baseline with its bootstrap 95% interval, one group per
    :class:`~course_embed.lab.bench.BenchTable` and one bar per variant; the copy is drawn as a line per group
    (the speed-up a plain copy of the minimum bytes would have: the ceiling of a layer that writes its output).
    """
    names = [r.name for r in tables[0].rows if r.name not in ("copy", tables[0].baseline)]
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        xs = [i + (k - (len(names) - 1) / 2) * width for i in range(len(tables))]
        cis = [t.ratio_ci(t.baseline, name) for t in tables]
        mids = [c[0] for c in cis]
        errors = [
            [m - c[1] for m, c in zip(mids, cis, strict=False)],
            [c[2] - m for m, c in zip(mids, cis, strict=False)],
        ]
        bars = ax.bar(xs, mids, width, yerr=errors, capsize=3, label=name)
        ax.bar_label(bars, fmt="%.2fx", fontsize=7, padding=6)
    for i, t in enumerate(tables):
        ax.hlines(
            t.ratio_ci(t.baseline, "copy")[0],
            i - 0.45,
            i + 0.45,
            color="k",
            ls="--",
            lw=1,
            label="same-size copy" if i == 0 else None,
        )
    ax.axhline(1, color="grey", lw=0.8)
    ax.set_ylabel(f"speed-up over {baseline_label or tables[0].baseline}")
    ax.set_xticks(range(len(tables)), [t.title for t in tables], fontsize=8)
    ax.legend(fontsize=8, ncol=len(names) + 1, loc="upper left")
    ax.margins(y=0.2)
    fig.tight_layout()
    return fig
