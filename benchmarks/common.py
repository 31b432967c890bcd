"""Shared command line and machine description for the benchmark scripts (run them from the repository root)."""

from __future__ import annotations

import argparse
import os
import platform
import sys

import torch

#: glibc settings that keep freed memory in the process (no mmap for big blocks, no trimming), as PyTorch's CUDA
#: caching allocator does on a GPU: big CPU allocations then stop costing page faults.
KEEP_MEMORY = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}


def parse(description: str, extra=()) -> argparse.Namespace:
    """``--device`` (default: cpu, and cuda when present), ``--threads`` (1), ``--rounds`` (11), ``--keep-memory``,
    and the script's own ``extra`` options, ``[(flag, add_argument keywords)]``."""
    parser = argparse.ArgumentParser(description=description)
    for flag, kwargs in extra:
        parser.add_argument(flag, **kwargs)
    parser.add_argument(
        "--device",
        action="append",
        choices=["cpu", "cuda"],
        help="device to run on (repeatable); default: cpu, and cuda when available",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op CPU threads (default 1: on a shared machine a second thread stalls at every "
        "parallel region whenever another job holds a core)",
    )
    parser.add_argument("--rounds", type=int, default=11, help="interleaved timing rounds; medians are reported")
    parser.add_argument(
        "--keep-memory",
        action="store_true",
        help="restart with glibc keeping freed memory, so fresh outputs cost no page faults",
    )
    args = parser.parse_args()
    if args.keep_memory and any(os.environ.get(k) != v for k, v in KEEP_MEMORY.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], os.environ | KEEP_MEMORY)  # tunables act at start-up
    args.device = args.device or (["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
    torch.set_num_threads(args.threads)
    return args


def machine() -> str:
    """One line describing where the numbers come from."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    load = ", load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()) if hasattr(os, "getloadavg") else ""
    memory = (
        "glibc keeps freed memory"
        if all(os.environ.get(k) == v for k, v in KEEP_MEMORY.items())
        else "default glibc allocator"
    )
    return (
        f"{cpu} ({os.cpu_count()} logical CPUs){gpu}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {memory}{load}"
    )


def time_shuffled(variants: dict, rounds: int, block_seconds: float = 0.02, seed: int = 0) -> dict[str, float]:
    """Median seconds per call of each zero-argument callable, timed in ``rounds`` rounds whose order is shuffled.

    Each measurement is the mean over a block of calls sized to last about ``block_seconds``; a shuffled order keeps
    a slow spell of a shared machine from always landing on the same variant.
    """
    import random
    import statistics
    import time

    order, times, numbers = list(variants), {name: [] for name in variants}, {}
    for name, fn in variants.items():  # warm up, then size the blocks
        fn()
        start = time.perf_counter()
        fn()
        numbers[name] = max(1, min(1 << 16, round(block_seconds / max(time.perf_counter() - start, 1e-9))))
    shuffle = random.Random(seed).shuffle
    for _ in range(rounds):
        shuffle(order)
        for name in order:
            fn, n = variants[name], numbers[name]
            start = time.perf_counter()
            for _ in range(n):
                fn()
            times[name].append((time.perf_counter() - start) / n)
    return {name: statistics.median(ts) for name, ts in times.items()}


def seconds(value: float) -> str:
    """A duration with a unit that keeps three significant digits."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"
