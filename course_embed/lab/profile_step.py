"""Chapter 6, the whole training step: a small GPT-style model built from the package, a profiler breakdown of
one step, a chunked cross-entropy, and a peak-memory meter.

Shapes: ``b`` batch, ``s`` sequence, ``d`` model width, ``v`` vocabulary, ``n = b s`` tokens, ``c`` chunk rows.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils._python_dispatch import TorchDispatchMode

from ..fusion import TransformerEmbedding
from ..token import tie_weights

#: the phases of :func:`profile_step`, in order
PHASES = (
    "input layer fwd",
    "blocks fwd",
    "head + loss fwd",
    "input layer bwd",
    "head + loss bwd",
    "blocks bwd",
    "optimizer: table",
    "optimizer: rest",
)


class TinyGPT(nn.Module):
    """Input layer (:class:`~course_embed.fusion.TransformerEmbedding`), pre-norm causal Transformer blocks, a final
    LayerNorm and an LM head ``(v, d)`` without bias, optionally tied to the token table.

    Shapes: ``forward(ids, targets)``: ids ``(b, s)``, targets ``(b, s)`` -> the mean cross-entropy (a scalar).
    """

    def __init__(
        self, vocab_size: int, d_model: int = 64, layers: int = 2, heads: int = 4, max_len: int = 128, tied: bool = True
    ):
        super().__init__()
        self.embed = TransformerEmbedding(vocab_size, d_model, dropout=0.0, max_len=max_len)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        if tied:
            tie_weights(self.embed.token, self.head)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(ids.shape[1], device=ids.device)
        with record_function("input layer fwd"):
            h = self.embed(ids)  # (b, s, d)
        with record_function("blocks fwd"):
            for block in self.blocks:
                h = block(h, src_mask=mask, is_causal=True)
        with record_function("head + loss fwd"):
            logits = self.head(self.norm(h))  # (b, s, v): the largest activation of the step
            return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


_NODE = "autograd::engine::evaluate_function: "


def _forward_phases(events) -> dict[int, str]:
    """The forward phase (a ``record_function`` range of :class:`TinyGPT`) of each autograd sequence number.

    Every operator that creates an autograd node records the node's sequence number; the node's backward event
    carries the same number. Operators run without a graph (inside a custom Function's forward, say) may record
    the number the next node will get, so the latest operator with a number wins: the one that created the node.
    """
    phases, started = {}, {}
    for event in events:
        if event.sequence_nr < 0 or event.name.startswith("autograd::"):
            continue
        parent = event.cpu_parent
        while parent is not None and parent.name not in PHASES:
            parent = parent.cpu_parent
        if parent is not None and event.time_range.start >= started.get(event.sequence_nr, -1):
            phases[event.sequence_nr], started[event.sequence_nr] = parent.name, event.time_range.start
    return phases


def _backward_phase(event, forward: dict[int, str]) -> str | None:
    """The backward phase of a profiler event of an autograd node: the phase whose forward created the node, found
    by sequence number (:func:`_forward_phases`); ``None`` for an event that is not a node. Nodes without a forward
    operator (``AccumulateGrad``, which stores a parameter's gradient) count under ``blocks bwd``."""
    if not event.name.startswith(_NODE):
        return None
    phase = forward.get(event.sequence_nr, "blocks fwd")
    return phase.replace(" fwd", " bwd")


@contextlib.contextmanager
def quiet_native_stderr():
    """Send what native code writes to file descriptor 2 to the null device while the block runs.

    The profiler's C++ library logs a line at every start and stop of a profile, straight to descriptor 2 (no
    setting turns it off); a chapter's output has no use for them. Python exceptions still propagate.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "wb") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def profile_step(model: TinyGPT, ids: torch.Tensor, targets: torch.Tensor, *, warmup: int = 1) -> dict[str, float]:
    """Milliseconds of each phase (:data:`PHASES`) of one training step, from ``torch.profiler`` (CPU time).

    The optimizer is Adam with ``foreach=True`` (one multi-tensor pass per moment), split in two: one for the token
    table (the largest parameter, shared with the head when tied), one for the rest, so the table's step is seen
    apart. ``warmup`` steps run first, outside the profile. Each backward node counts in the phase whose forward
    created it (:func:`_backward_phase`, by autograd sequence number); the phases add up to the step's profiled time
    minus small bookkeeping.
    """
    table = model.embed.token.weight
    rest = [p for p in model.parameters() if p is not table]
    opt_table = torch.optim.Adam([table], lr=1e-3, foreach=True)
    opt_rest = torch.optim.Adam(rest, lr=1e-3, foreach=True)

    def step():
        loss = model(ids, targets)
        loss.backward()
        with record_function("optimizer: table"):
            opt_table.step()
        with record_function("optimizer: rest"):
            opt_rest.step()
        opt_table.zero_grad(set_to_none=True)
        opt_rest.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    with quiet_native_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    totals = dict.fromkeys(PHASES, 0.0)
    events = prof.events()
    forward = _forward_phases(events)
    for event in events:
        phase = event.name if event.name in totals else _backward_phase(event, forward)
        if phase is not None:
            totals[phase] += event.cpu_time_total / 1e3
    return totals


class _ChunkedCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of ``h @ W.T`` computed ``c`` rows at a time; the backward recomputes each chunk's
    logits, so no ``(n, v)`` tensor is ever held (the idea behind Liger's and Cut Cross-Entropy's kernels)."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk: int):
        n = hidden.shape[0]
        lse = torch.empty(n, dtype=hidden.dtype, device=hidden.device)  # log-sum-exp of each row's logits
        picked = torch.empty(n, dtype=hidden.dtype, device=hidden.device)  # each row's target logit
        for i in range(0, n, chunk):
            logits = hidden[i : i + chunk] @ weight.T  # (c, v), freed after this iteration
            lse[i : i + chunk] = torch.logsumexp(logits, dim=-1)
            picked[i : i + chunk] = logits.gather(-1, targets[i : i + chunk, None]).squeeze(-1)
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.chunk = chunk
        return (lse - picked).mean()

    @staticmethod
    def backward(ctx, grad):
        hidden, weight, targets, lse = ctx.saved_tensors
        n, chunk = hidden.shape[0], ctx.chunk
        grad_hidden, grad_weight = torch.empty_like(hidden), torch.zeros_like(weight)
        for i in range(0, n, chunk):
            h = hidden[i : i + chunk]
            probs = (h @ weight.T).sub_(lse[i : i + chunk, None]).exp_()  # (c, v) softmax, recomputed
            rows = torch.arange(h.shape[0], device=h.device)
            probs[rows, targets[i : i + chunk]] -= 1.0
            probs.mul_(grad / n)
            grad_hidden[i : i + chunk] = probs @ weight
            grad_weight.addmm_(probs.T, h)
        return grad_hidden, grad_weight, None, None


def chunked_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int = 256
) -> torch.Tensor:
    """``F.cross_entropy(hidden @ weight.T, targets)`` without materialising the ``(n, v)`` logits.

    hidden ``(n, d)``, weight ``(v, d)``, targets ``(n,)`` -> the mean loss. Peak extra memory is one ``(c, v)``
    block instead of the logits, their softmax and its gradient (three ``(n, v)`` tensors); the price is computing
    the logits twice (once more in the backward).
    """
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of rows, got {chunk}")
    return _ChunkedCrossEntropy.apply(hidden, weight, targets, chunk)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


class PeakMemory(TorchDispatchMode):
    """Peak bytes in use (glibc's ``mallinfo2``: heap in use + mmapped blocks) above the level at entry, sampled
    after every operator that runs inside ``with PeakMemory() as meter:`` (backward included); ``meter.peak``.

    CPU and glibc only (on CUDA use ``torch.cuda.max_memory_allocated``). Temporaries freed inside one operator
    are not seen, so this is a lower bound on the true peak, but it does see every operator's outputs.
    """

    def __init__(self):
        super().__init__()
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        if not hasattr(libc, "mallinfo2"):
            raise RuntimeError(
                "PeakMemory needs glibc >= 2.33 (mallinfo2); on CUDA use torch.cuda.max_memory_allocated"
            )
        libc.mallinfo2.restype = _Mallinfo2
        self._info = libc.mallinfo2
        self.base = self._used()
        self.peak = 0

    def _used(self) -> int:
        info = self._info()
        return info.uordblks + info.hblkhd

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.peak = max(self.peak, self._used() - self.base)
        return out
