"""Timing harness: time, achieved bandwidth and the share of a copy's rate, measured side by side.

Shapes: ``b`` batch, ``s`` sequence, ``d`` model width, ``h`` heads, ``h_d`` head dim.

An input layer does almost no arithmetic: it moves memory. Its speed limit is therefore

    time >= bytes that must move / memory bandwidth,

and the honest way to report a kernel is the bandwidth it achieves on the *minimum* bytes (what any
implementation has to read and write), next to a plain copy of the same number of bytes timed in the same run:
a copy is the fastest way to move bytes, so the variant's GB/s over the copy's says how close to the limit a variant is
(``copy time / variant time`` where the two move the same bytes).

:func:`compare` times every variant in interleaved rounds, each round in a freshly shuffled order (A, C, copy,
B, then C, B, A, copy, ...), so a noisy neighbour slows all of them alike and no variant always runs after the
same one; it reports medians. A ratio of two variants comes with a distribution-free confidence interval of the
median of the per-round ratios (:meth:`BenchTable.ratio_ci`): the rounds are paired (A and B of round k ran close
together), and the interval runs between two order statistics of those ratios chosen from the binomial
distribution. Below 9 rounds the only such interval at 95% is the whole range of the ratios, and the table says
"range of n rounds" instead of "95% CI". The baseline is timed twice (``textbook`` and ``textbook'``): the ratio of
the two is 1 by construction, and its interval, printed under every table, is the run's noise floor. CPU timings
use ``torch.utils.benchmark.Timer`` with an explicit thread count; CUDA timings use CUDA events (no host
synchronisation inside the timed loop).
"""

from __future__ import annotations

import functools
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils.deterministic
from torch.utils import benchmark

COPY = "copy"


def embedding_bytes(batch: int, seq: int, d_model: int, itemsize: int) -> int:
    """Minimum bytes an embedding + position layer moves: ``itemsize * (2 b s d + s d)``.

    It must read ``b s`` table rows of ``d`` values and write the ``(b, s, d)`` output once, and read the ``(s, d)``
    position rows once (ids are ignored: ``d`` times smaller).
    """
    return itemsize * (2 * batch * seq * d_model + seq * d_model)


def gather_bytes(batch: int, seq: int, d_model: int, itemsize: int) -> int:
    """Bytes the bare lookup ``W[ids]`` moves: ``itemsize * 2 b s d`` (read the rows, write the output)."""
    return itemsize * 2 * batch * seq * d_model


def embedding_traffic(batch: int, seq: int, d_model: int, itemsize: int) -> dict[str, int]:
    """Bytes each way of computing ``W[ids] * sqrt(d) + pe`` moves, counting every pass over a ``(b, s, d)`` tensor.

    ``"minimum"`` (one pass: :func:`embedding_bytes`); ``"fused eager"`` (gather: read rows, write the output; then
    an in-place add: read it and the position rows, write it back); ``"textbook"`` (gather; multiply: read, write a
    new tensor; add: read it and the position rows, write a third tensor).
    """
    n, pe = batch * seq * d_model, seq * d_model
    return {
        "minimum": itemsize * (2 * n + pe),
        "fused eager": itemsize * (4 * n + pe),
        "textbook": itemsize * (6 * n + pe),
    }


def rope_bytes(batch: int, heads: int, seq: int, head_dim: int, itemsize: int) -> int:
    """Minimum bytes RoPE moves on ``q`` ``(b, h, s, h_d)``: ``itemsize * (2 b h s h_d + 2 s h_d)``.

    Read ``q`` and write the result once, and read the cos and sin tables once, counted at full head width
    ``(s, h_d)`` each as the rotate_half formulation stores them (interleaved pairs need half of that).
    """
    return itemsize * (2 * batch * heads * seq * head_dim + 2 * seq * head_dim)


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes held by ``t``: its elements, or for a sparse COO tensor its indices plus values (as stored)."""
    if t.layout == torch.sparse_coo:
        return tensor_bytes(t._indices()) + tensor_bytes(t._values())
    return t.numel() * t.element_size()


def saved_tensor_bytes(fn: Callable[[], torch.Tensor]) -> int:
    """Bytes autograd keeps for the backward pass while running ``fn()`` (each distinct storage counted once).

    This is the memory that gradient checkpointing could free; for an embedding lookup it is only the ids.
    """
    seen: dict[tuple, int] = {}

    def pack(t: torch.Tensor):
        if t.layout == torch.strided and t.device.type != "meta":
            key = (t.untyped_storage().data_ptr(), t.device)
            seen[key] = max(seen.get(key, 0), t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def time_cpu(fn: Callable[[], Any], number: int, threads: int) -> float:
    """Seconds per call of ``fn`` over one block of ``number`` calls, on ``threads`` intra-op threads."""
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    return timer.timeit(number).mean


def time_cuda(
    fn: Callable[[], Any],
    number: int,
    *,
    event_factory: Callable[[], Any] | None = None,
    synchronize: Callable[[], None] | None = None,
) -> float:
    """Seconds per call of ``fn`` over ``number`` calls, measured with CUDA events.

    The two events are recorded on the stream around the loop, so the host never waits inside it; the end event
    is then awaited. ``event_factory`` and ``synchronize`` default to ``torch.cuda.Event(enable_timing=True)`` and
    ``torch.cuda.synchronize`` (the tests pass stand-ins to check the logic without a GPU).
    """
    event_factory = event_factory or functools.partial(torch.cuda.Event, enable_timing=True)
    synchronize = synchronize or torch.cuda.synchronize
    synchronize()  # start from an idle stream
    start, end = event_factory(), event_factory()
    start.record()
    for _ in range(number):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / number  # elapsed_time is in milliseconds


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory in the process (no ``mmap`` for big blocks, no trimming), so that a fresh
    output the size of a previous one costs no page faults, as with PyTorch's CUDA caching allocator.

    Call it before timing variants that allocate large outputs, so that no variant (a dense baseline, say) pays
    page faults the others do not. Returns ``False`` where ``mallopt`` is unavailable (not glibc).
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        m_trim_threshold, m_mmap_max = -1, -4  # glibc's mallopt parameters
        return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 2**30))
    except (OSError, AttributeError):
        return False


def setup_timing(threads: int) -> bool:
    """Prepare this process for timing on the CPU, so that every variant pays for memory and compilation the same way.

    Sets ``threads`` intra-op threads; turns off ``torch.utils.deterministic.fill_uninitialized_memory`` (under
    ``torch.use_deterministic_algorithms(True)`` it fills every new tensor with NaN, an extra pass that only some
    variants pay); turns off Inductor's disk cache of compiled graphs (its key ignores ``ATEN_CPU_CAPABILITY``, so a
    cached kernel could come from another kernel selection); and calls :func:`keep_freed_memory`, whose result it
    returns.
    """
    import torch._inductor.config

    torch.set_num_threads(threads)
    torch.utils.deterministic.fill_uninitialized_memory = False
    torch._inductor.config.fx_graph_cache = False
    return keep_freed_memory()


def make_copy(nbytes: int, device, dtype: torch.dtype = torch.float32) -> Callable[[], torch.Tensor]:
    """A reference that moves ``nbytes``: copy ``nbytes / 2`` bytes into a new tensor (read + write).

    Like the variants it is compared with, it returns a fresh tensor, so it pays for allocating one too (on a CPU,
    page faults on fresh memory; on CUDA the caching allocator makes that free): ``copy time / variant time`` then
    compares like with like, a clone of the input against a computed output.
    """
    numel = max(1, nbytes // (2 * torch.empty((), dtype=dtype).element_size()))
    src = torch.ones(numel, device=device, dtype=dtype)
    return lambda: src.clone()


@dataclass(frozen=True)
class Row:
    """One variant's result: median seconds per call over the rounds, and the per-round times."""

    name: str
    seconds: float
    rounds: tuple[float, ...]
    nbytes: int

    @property
    def gbps(self) -> float:
        """Achieved bandwidth on this variant's bytes, in GB/s (1e9 bytes)."""
        return self.nbytes / self.seconds / 1e9

    @property
    def spread(self) -> float:
        """Interquartile range of the rounds over their median (0.05: the middle half of rounds within 5%)."""
        q = statistics.quantiles(self.rounds, n=4) if len(self.rounds) > 1 else [self.seconds] * 3
        return (q[2] - q[0]) / self.seconds


@dataclass(frozen=True)
class BenchTable:
    """Variants of one computation timed side by side, with a copy of the layer's bytes and a baseline."""

    title: str
    rows: tuple[Row, ...]
    baseline: str
    clock: str
    device: str

    def row(self, name: str) -> Row:
        """The row called ``name``."""
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(f"no variant {name!r}; the table has {[r.name for r in self.rows]}")

    def speedup(self, name: str) -> float:
        """How many times faster ``name`` is than the baseline (ratio of medians)."""
        return self.row(self.baseline).seconds / self.row(name).seconds

    @property
    def has_copy(self) -> bool:
        """Whether the table has the reference copy (and so GB/s and "of copy" columns)."""
        return any(r.name == COPY for r in self.rows)

    def of_copy(self, name: str) -> float:
        """The variant's bandwidth over the copy's, each on its own bytes: 1.0 means as fast as copying its bytes.

        For a variant that moves the bytes the copy moves this is ``copy time / variant time``; a variant that moves
        fewer (the bare gather reads no position rows) is compared with the copy's rate, not with a copy of more
        bytes than it moves.
        """
        return self.row(name).gbps / self.row(COPY).gbps

    @property
    def n_rounds(self) -> int:
        """How many rounds every variant was timed in."""
        return len(self.rows[0].rounds)

    @property
    def interval_label(self) -> str:
        """``"95% CI"``, or ``"range of n rounds"`` when ``n`` is too small for an interval narrower than the range."""
        return "95% CI" if median_interval_ranks(self.n_rounds)[0] > 1 else f"range of {self.n_rounds} rounds"

    def ratio_ci(self, slow: str, fast: str, *, level: float = 0.95) -> tuple[float, float, float]:
        """``time(slow) / time(fast)``: the median of the per-round ratios and an interval for it, ``(mid, low, high)``.

        Round ``k`` of both ran in the same round, so the ratios are paired. The interval is the distribution-free
        one for a median: the ``j``-th smallest and the ``j``-th largest ratio, with ``j`` from
        :func:`median_interval_ranks` (for 15 rounds, the 4th and the 12th of the 15 sorted ratios).
        """
        a, b = self.row(slow).rounds, self.row(fast).rounds
        ratios = sorted(x / y for x, y in zip(a, b, strict=True))
        j, k = median_interval_ranks(len(ratios), level)
        return statistics.median(ratios), ratios[j - 1], ratios[k - 1]

    def noise_floor(self) -> tuple[float, float] | None:
        """The interval of the baseline against its own second copy (``baseline'``), or ``None`` without one."""
        twin = self.baseline + "'"
        if not any(r.name == twin for r in self.rows):
            return None
        return self.ratio_ci(self.baseline, twin)[1:]

    def format(self) -> str:
        """The table as aligned text: variant, median time, GB/s, fraction of copy, speedup over the baseline."""
        width = max(len(r.name) for r in self.rows)
        bandwidth = f"  {'GB/s':>6}  {'of copy':>7}" if self.has_copy else ""
        label = f"speedup [{self.interval_label}]"
        lines = [
            f"{self.title}  [{self.device}, {self.clock}, median of {self.n_rounds} rounds, shuffled order]",
            f"{'variant':<{width}}  {'median':>10}  {'IQR':>5}{bandwidth}  {label:>20}",
        ]
        for r in self.rows:
            mid, low, high = self.ratio_ci(self.baseline, r.name)
            bandwidth = f"  {r.gbps:6.1f}  {self.of_copy(r.name):7.0%}" if self.has_copy else ""
            lines.append(
                f"{r.name:<{width}}  {_fmt_time(r.seconds):>10}  {r.spread:5.0%}{bandwidth}  "
                f"{mid:6.2f}x [{low:4.2f}, {high:4.2f}]"
            )
        floor = self.noise_floor()
        if floor is not None:
            lines.append(
                f"noise floor ({self.baseline} / {self.baseline}', 1 by construction): [{floor[0]:.2f}, {floor[1]:.2f}]"
            )
        return "\n".join(lines)


def median_interval_ranks(n: int, level: float = 0.95) -> tuple[int, int]:
    """1-based ranks ``(j, n + 1 - j)`` of the order statistics that bound a ``level`` interval for a median.

    For ``n`` independent samples the median lies below the ``j``-th smallest with probability
    ``P(Binomial(n, 1/2) < j)``; ``j`` is the largest rank with ``P(Binomial(n, 1/2) <= j - 1) <= (1 - level) / 2``,
    so the interval covers the median with probability at least ``level``. When even ``j = 1`` (the range) does
    not reach ``level`` (fewer than 6 samples at 95%), the range is returned all the same: its coverage is
    ``1 - 2 / 2**n``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    tail, j, cumulative = (1 - level) / 2, 1, 0.0
    while j < (n + 1) // 2:
        cumulative += math.comb(n, j - 1) / 2**n  # P(Binomial(n, 1/2) <= j - 1)
        if cumulative + math.comb(n, j) / 2**n > tail:
            break
        j += 1
    return j, n + 1 - j


def _fmt_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def compare(
    variants: dict[str, Callable[[], Any]],
    nbytes: int | None,
    *,
    baseline: str,
    device=None,
    dtype: torch.dtype = torch.float32,
    threads: int = 2,
    rounds: int = 15,
    block_seconds: float = 0.02,
    title: str = "",
    variant_bytes: dict[str, int] | None = None,
    noise_floor: bool = True,
    seed: int = 0,
    calls: int | None = None,
) -> BenchTable:
    """Time ``variants`` side by side with a copy of ``nbytes``; return medians, GB/s, fraction of copy, speed-ups.

    Args:
        variants: name -> zero-argument callable doing one call of the computation (inputs prepared outside).
        nbytes: minimum bytes the computation moves (:func:`embedding_bytes`, :func:`rope_bytes`); ``None`` for a
            computation that is not bandwidth-bound (a training step, a loss): no copy, no GB/s columns.
        baseline: the variant speedups are relative to (usually the textbook version).
        device: where the inputs live (CPU timer or CUDA events); default CPU.
        dtype: dtype of the copy reference.
        threads: intra-op threads for CPU timing (set explicitly: the default depends on the machine).
        rounds: interleaved rounds, each in a shuffled order; each reports the mean of a block, the table the
            median of the blocks. From 9 rounds on, a ratio's 95% interval is narrower than the range of its ratios.
        block_seconds: each block is calibrated (from the median of 3 single calls) to last at least this long
            (20 ms: long against the timer's resolution and against one scheduler tick); ``baseline'`` runs
            blocks of the baseline's size, so that the noise floor compares identical work.
        title: first line of :meth:`BenchTable.format`.
        variant_bytes: the bytes a variant itself must move, where they differ from ``nbytes`` (the bare gather
            reads no position rows); its GB/s column uses them.
        noise_floor: time the baseline a second time as ``baseline'`` (unless ``variants`` already has it), so that
            the table prints the run's noise floor.
        seed: of the shuffled order of each round.
        calls: calls per block for every variant, instead of calibrating them (processes of one group that time a
            collective must call it equally often, or one waits for the other forever).

    Returns:
        :class:`BenchTable` with one row per variant, plus ``"copy"`` (and ``baseline'``).

    While timing, ``torch.utils.deterministic.fill_uninitialized_memory`` is off (and restored afterwards): under
    ``torch.use_deterministic_algorithms(True)`` it fills every new tensor with NaN, an extra pass over memory that
    is a debugging aid, not part of the computation.
    """
    if baseline not in variants:
        raise ValueError(
            f"baseline={baseline!r} is not one of the variants {list(variants)}; name the textbook "
            f"version you want speedups against"
        )
    if COPY in variants:
        raise ValueError(f"{COPY!r} is reserved for the reference copy; rename that variant")
    if rounds < 1 or threads < 1:
        raise ValueError(f"rounds and threads must be >= 1, got rounds={rounds}, threads={threads}")
    if calls is not None and calls < 1:
        raise ValueError(f"calls must be a positive number of calls per block, got {calls}; or None to calibrate")
    if block_seconds <= 0:
        raise ValueError(f"block_seconds must be > 0, got {block_seconds}; 0.02 (20 ms) is a good block")
    device = torch.device(device) if device is not None else torch.device("cpu")
    fns = dict(variants)
    if noise_floor and baseline + "'" not in fns:
        names = list(fns)
        fns = {k: fns[k] for k in names[: names.index(baseline) + 1]} | {baseline + "'": fns[baseline]} | fns
    fns |= {COPY: make_copy(nbytes, device, dtype)} if nbytes is not None else {}
    cuda = device.type == "cuda"
    clock = time_cuda if cuda else functools.partial(time_cpu, threads=threads)
    numbers, times = {}, {name: [] for name in fns}
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        for name, fn in fns.items():  # warm up, then size each block from the median of 3 calls
            fn()
            if calls is None:
                one = statistics.median(clock(fn, 1) for _ in range(3))
            numbers[name] = calls or max(1, min(1 << 20, math.ceil(block_seconds / max(one, 1e-9))))
        if baseline + "'" in numbers:  # the twin does the baseline's work exactly, block size included
            numbers[baseline + "'"] = numbers[baseline]
        order, shuffle = list(fns), random.Random(seed).shuffle
        for _ in range(rounds):
            shuffle(order)
            for name in order:
                times[name].append(clock(fns[name], numbers[name]))
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = fill
    own = variant_bytes or {}
    rows = tuple(Row(name, statistics.median(ts), tuple(ts), own.get(name, nbytes or 0)) for name, ts in times.items())
    where = f"CUDA events, {torch.cuda.get_device_name(device)}, {dtype}" if cuda else f"{threads} threads"
    return BenchTable(title, rows, baseline, where, device.type)
