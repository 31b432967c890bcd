"""Chapters 6 and 7: precision errors, lost updates, the dict-cache and checkpointing anti-patterns, autocast,
EmbeddingBag, the speed-up figure of the benchmark tables, and lazy (SparseAdam) against dense Adam trained on real
text (the roofline is in :mod:`.roofline`, the training step in :mod:`.profile_step`).

Shapes: ``v`` vocabulary size, ``d`` model width, ``n`` tokens in a stream, ``b`` batch.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from matplotlib.ticker import NullFormatter

from ..runtime import single_thread
from . import bench, corpus
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
    """Speed-up over each table's baseline, a dot per variant with its interval, on a log axis; one group per
    :class:`~course_embed.lab.bench.BenchTable`. The copy is a dashed line per group (the speed-up a plain copy of
    the minimum bytes would have: the ceiling of a layer that writes its output); the noise floor (the baseline
    against its own second copy) is a grey band per group. A variant missing from a table (a row left out as not a
    measurement) has no dot in that group.
    """
    baseline = tables[0].baseline
    skip = ("copy", baseline, baseline + "'")
    names = list(dict.fromkeys(r.name for t in tables for r in t.rows if r.name not in skip))
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        kept = [i for i, t in enumerate(tables) if any(r.name == name for r in t.rows)]
        xs = [i + (k - (len(names) - 1) / 2) * width for i in kept]
        cis = [tables[i].ratio_ci(tables[i].baseline, name) for i in kept]
        mids = [c[0] for c in cis]
        errors = [
            [m - c[1] for m, c in zip(mids, cis, strict=True)],
            [c[2] - m for m, c in zip(mids, cis, strict=True)],
        ]
        ax.errorbar(xs, mids, yerr=errors, fmt="o", ms=5, capsize=3, label=name)
    for i, t in enumerate(tables):
        floor = t.noise_floor()
        if floor is not None:
            ax.fill_between(
                [i - 0.45, i + 0.45], *floor, color="0.85", zorder=0, label="noise floor" if i == 0 else None
            )
        if t.has_copy:
            copy = t.ratio_ci(t.baseline, "copy")[0]
            ax.hlines(
                copy,
                i - 0.45,
                i + 0.45,
                color="k",
                ls="--",
                lw=1,
                label="copy of the layer's bytes" if i == 0 else None,
            )
    ax.set_yscale("log")
    low, high = ax.get_ylim()  # plain tick labels (0.6, 1, 2, ...) instead of powers of ten
    ticks = [t for t in (0.3, 0.4, 0.6, 0.8, 1, 1.5, 2, 3, 4, 6, 8, 12, 16) if low <= t <= high]
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.axhline(1, color="grey", lw=0.8)
    ax.set_ylabel(f"speed-up over {baseline_label or baseline} (log)")
    ax.set_xticks(range(len(tables)), [t.title for t in tables], fontsize=8)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    fig.tight_layout()
    return fig


# --- lazy against dense Adam, trained --------------------------------------------------------------------------


def word_stream(min_count: int = 2, valid_fraction: float = 0.1) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """The :func:`~course_embed.lab.corpus.corpus_bytes` text as word ids: a Zipf-like vocabulary of a few thousand.

    Tokens are lower-case runs of letters and single other characters (punctuation, digits). The first
    ``1 - valid_fraction`` of the tokens train, the rest is held out. Words seen fewer than ``min_count`` times in
    the training part share id 0 (``"<unk>"``); the others are numbered by decreasing training count.

    Returns:
        ``(train, valid, vocab)``: int64 ids ``(n_train,)`` and ``(n_valid,)``, and the vocabulary (id -> word).
    """
    if not 0 < valid_fraction < 1:
        raise ValueError(f"valid_fraction must be in (0, 1), got {valid_fraction}")
    if min_count < 1:
        raise ValueError(f"min_count must be a positive integer, got {min_count}")
    words = re.findall(r"[a-z]+|[^\sa-z]", corpus.corpus_bytes().decode("utf-8").lower())
    cut = int(len(words) * (1 - valid_fraction))
    counts = Counter(words[:cut])
    vocab = ["<unk>"] + sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    index = {w: i for i, w in enumerate(vocab)}
    ids = torch.tensor([index.get(w, 0) for w in words])
    return ids[:cut], ids[cut:], vocab


def bigram_init(vocab_size: int, d_model: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """The parameters of :func:`bigram_losses`, drawn from ``generator`` in this order: ``table`` ``(v, d)``
    N(0, 1) (``nn.Embedding``'s init), ``mix`` ``(d, d)`` and ``head`` ``(v, d)`` N(0, 1/d); ``bias`` ``(v,)`` zero."""
    return {
        "table": torch.randn(vocab_size, d_model, generator=generator),
        "mix": torch.randn(d_model, d_model, generator=generator) * d_model**-0.5,
        "head": torch.randn(vocab_size, d_model, generator=generator) * d_model**-0.5,
        "bias": torch.zeros(vocab_size),
    }


def bigram_losses(
    params: dict[str, torch.Tensor], ids: torch.Tensor, targets: torch.Tensor, sparse: bool = False
) -> torch.Tensor:
    """Cross-entropy of the next-token model ``logits = tanh(table[ids] @ mix) @ head.T + bias``, per token.

    ids, targets ``(n,)`` -> ``(n,)``. The input table is untied from the head, so with ``sparse=True`` its
    gradient is sparse (one row per id) and :class:`torch.optim.SparseAdam` can train it.
    """
    h = torch.tanh(F.embedding(ids, params["table"], sparse=sparse) @ params["mix"])  # (n, d)
    return F.cross_entropy(h @ params["head"].T + params["bias"], targets, reduction="none")


@dataclass(frozen=True)
class LazyAdamRun:
    """One training run of :func:`lazy_adam_study`.

    ``optimizer``: ``"Adam"`` (dense table gradient) or ``"SparseAdam"`` (lazy). ``train_losses``: the batch loss
    before each step. ``rows_moved``: the table rows the step changed; ``rows_in_batch``: the distinct ids of the
    step's batch. ``held_out``: the mean held-out loss; ``bands``: the same, over the held-out tokens whose input id
    was seen a number of times in training within each band. ``params``: the trained parameters.
    """

    optimizer: str
    seed: int
    train_losses: tuple[float, ...]
    rows_moved: tuple[int, ...]
    rows_in_batch: tuple[int, ...]
    held_out: float
    bands: dict[str, float]
    params: dict[str, torch.Tensor]


def frequency_bands(counts: torch.Tensor, edges: tuple[int, ...]) -> tuple[torch.Tensor, list[str]]:
    """The band of every id by its training count: ``(v,)`` band indices and their names, rarest band first.

    ``edges`` (increasing) split the counts into ``[0, e0)``, ``[e0, e1)``, ..., ``[e_last, inf)``.
    """
    if not edges or any(e < 1 for e in edges) or list(edges) != sorted(set(edges)):
        raise ValueError(f"edges must be increasing positive counts, e.g. (10, 100, 1000), got {edges}")
    bounds = (0, *edges)
    names = [f"{lo}-{hi - 1}" for lo, hi in zip(bounds, edges, strict=False)] + [f"{edges[-1]}+"]
    return torch.bucketize(counts, torch.tensor(edges), right=True), names


def _train_bigram(train, vocab_size, lazy, seed, steps, batch, d_model, lr, batch_seed=None):
    gen = torch.Generator().manual_seed(seed)
    params = {k: torch.nn.Parameter(v) for k, v in bigram_init(vocab_size, d_model, gen).items()}
    draw = gen if batch_seed is None else torch.Generator().manual_seed(batch_seed)
    positions = torch.randint(0, len(train) - 1, (steps, batch), generator=draw)
    table = params["table"]
    dense = torch.optim.Adam([params[k] for k in ("mix", "head", "bias")], lr=lr, fused=True)
    rows = torch.optim.SparseAdam([table], lr=lr) if lazy else torch.optim.Adam([table], lr=lr, fused=True)
    losses, moved, present = [], [], []
    for pos in positions:
        loss = bigram_losses(params, train[pos], train[pos + 1], sparse=lazy).mean()
        dense.zero_grad(set_to_none=True)
        rows.zero_grad(set_to_none=True)
        loss.backward()
        before = table.detach().clone()
        dense.step()
        rows.step()
        losses.append(loss.item())
        moved.append((table.detach() != before).any(dim=1).sum().item())
        present.append(train[pos].unique().numel())
    return {k: v.detach() for k, v in params.items()}, losses, moved, present, positions


CONTROL = "Adam, other batches"


def lazy_adam_study(
    train: torch.Tensor,
    valid: torch.Tensor,
    vocab_size: int,
    seeds: tuple[int, ...] = (0, 1, 2),
    steps: int = 200,
    batch: int = 64,
    d_model: int = 32,
    lr: float = 1e-2,
    edges: tuple[int, ...] = (10, 100, 1000),
    band_by: str = "training",
    control: bool = False,
) -> list[LazyAdamRun]:
    """Train :func:`bigram_losses` twice per seed, the table with dense Adam and with SparseAdam; one thread.

    Both runs of a seed start from :func:`bigram_init` with ``torch.Generator().manual_seed(seed)`` and then draw
    from the same generator the ``(steps, batch)`` positions of their batches (input ``train[p]``, target
    ``train[p + 1]``), so they see the same data. ``mix``, ``head`` and ``bias`` use ``Adam(fused=True)`` in both;
    the table uses ``Adam(fused=True)`` on a dense gradient or ``SparseAdam`` on a sparse one; same ``lr``, betas
    and eps everywhere. The held-out loss is over every ``(valid[t], valid[t + 1])``; its bands group those
    tokens by how often the input id occurred (:func:`frequency_bands`): in the whole training text
    (``band_by="training"``) or in the batches the seed's runs actually drew (``band_by="batches"``: what the
    optimizers saw).

    ``control=True`` adds a third run per seed, ``"Adam, other batches"``: dense Adam from the same init on batches
    drawn from ``torch.Generator().manual_seed(seed + 10_000)``: other batches from the same text, not a reordering of
    the seed's. Its difference from the seed's Adam run is the noise of drawing other data (bands as the seed's Adam
    run's, which the control did not see); chapter 7 uses a reordering of the seed's own batches instead.

    Returns:
        per seed, the Adam run, the SparseAdam run (and the control) (:class:`LazyAdamRun`).
    """
    for name, value in (("train", train), ("valid", valid)):
        if value.dim() != 1 or value.dtype != torch.int64 or len(value) < 2:
            raise ValueError(
                f"{name} must be int64 ids of shape (n,) with n >= 2, got {value.dtype} {tuple(value.shape)}"
            )
        if value.min() < 0 or value.max() >= vocab_size:
            raise ValueError(f"{name} ids must lie in [0, vocab_size={vocab_size}), got [{value.min()}, {value.max()}]")
    for name, value in (("steps", steps), ("batch", batch), ("d_model", d_model)):
        if value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")
    if lr <= 0:
        raise ValueError(f"lr must be positive, got {lr}")
    if not seeds:
        raise ValueError("seeds must name at least one seed, e.g. (0, 1, 2)")
    if band_by not in ("training", "batches"):
        raise ValueError(f"band_by must be 'training' or 'batches', got {band_by!r}")
    band_of, names = frequency_bands(torch.bincount(train, minlength=vocab_size), edges)
    runs = []
    with single_thread():
        for seed in seeds:
            token_band = band_of[valid[:-1]]
            for name, lazy, batch_seed in (("Adam", False, None), ("SparseAdam", True, None), (CONTROL, False, 0)):
                if name == CONTROL and not control:
                    continue
                batch_seed = None if batch_seed is None else seed + 10_000
                args = (train, vocab_size, lazy, seed, steps, batch, d_model, lr, batch_seed)
                params, losses, moved, present, positions = _train_bigram(*args)
                if band_by == "batches" and name == "Adam":  # the seed's batches, shared with SparseAdam
                    seen = torch.bincount(train[positions].flatten(), minlength=vocab_size)
                    token_band = frequency_bands(seen, edges)[0][valid[:-1]]
                with torch.no_grad():
                    chunks = zip(valid[:-1].split(4096), valid[1:].split(4096), strict=True)
                    held = torch.cat([bigram_losses(params, x, y) for x, y in chunks])  # never all (n, v) logits
                bands = {n: held[token_band == k].mean().item() for k, n in enumerate(names) if (token_band == k).any()}
                runs.append(
                    LazyAdamRun(
                        name,
                        seed,
                        tuple(losses),
                        tuple(moved),
                        tuple(present),
                        held.mean().item(),
                        bands,
                        params,
                    )
                )
    return runs
