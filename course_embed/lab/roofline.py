"""Chapter 6, a measured roofline: copy bandwidth against working-set size (the cache staircase), a measured
matrix-multiply rate, and the chapter's variants placed on both.

The roofline model (Williams et al., 2009): a kernel doing ``F`` FLOPs while moving ``Q`` bytes has arithmetic
intensity ``I = F / Q`` and runs at most at ``min(peak FLOP/s, I * bandwidth)``. Which bandwidth depends on where
the bytes live: a working set that fits in a cache streams faster than one that comes from DRAM, so the sweep
measures it per size instead of quoting one number.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from torch.utils import benchmark


def copy_seconds(nbytes: int, threads: int = 1, min_run_time: float = 0.02) -> float:
    """Median seconds of ``dst.copy_(src)`` moving ``nbytes`` in all (``nbytes / 2`` read, as many written).

    Both buffers are allocated once, outside the timing: this is the bandwidth of the level of the memory
    hierarchy that holds ``nbytes``, without page faults.
    """
    numel = max(1, nbytes // 8)  # float32: read numel * 4 bytes, write numel * 4 bytes
    src, dst = torch.ones(numel), torch.empty(numel)
    timer = benchmark.Timer(stmt="dst.copy_(src)", globals={"dst": dst, "src": src}, num_threads=threads)
    return timer.blocked_autorange(min_run_time=min_run_time).median


def bandwidth_sweep(sizes: list[int], threads: int = 1, min_run_time: float = 0.02) -> list[tuple[int, float]]:
    """``[(bytes moved, GB/s)]`` of a copy for each working-set size in ``sizes`` (bytes, read + write)."""
    return [(n, n / copy_seconds(n, threads, min_run_time) / 1e9) for n in sizes]


def matmul_gflops(n: int = 512, threads: int = 1, min_run_time: float = 0.05) -> float:
    """Measured float32 matrix-multiply rate (GFLOP/s) of an ``(n, n) @ (n, n)`` product: ``2 n**3`` FLOPs."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    timer = benchmark.Timer(stmt="a @ b", globals={"a": a, "b": b}, num_threads=threads)
    return 2 * n**3 / timer.blocked_autorange(min_run_time=min_run_time).median / 1e9


def input_layer_intensity(batch: int, seq: int, d_model: int, itemsize: int = 4) -> float:
    """FLOP per byte of ``W[ids] * sqrt(d) + pe``: ``2 b s d`` FLOPs (a multiply and an add per element) over
    the minimum bytes ``itemsize (2 b s d + s d)``. In float32 that is ``b / (4 b + 2)``: 1/6 at batch 1, rising to
    0.25 for large batches, whatever ``s`` and ``d``."""
    n = batch * seq * d_model
    return 2 * n / (itemsize * (2 * n + seq * d_model))


def roofline_figure(sweep: list[tuple[int, float]], peak_gflops: float, points: dict[str, tuple[int, float, float]]):
    """Two panels: the measured staircase with each variant at its working set, and the roofline with each variant.

    Args:
        sweep: :func:`bandwidth_sweep` output.
        peak_gflops: :func:`matmul_gflops`, the compute roof.
        points: name -> (working set on the left panel's axis, achieved GB/s on the bytes the variant moves,
            FLOP per byte).
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    sizes, rates = zip(*sweep, strict=False)
    left.plot([s / 2**20 for s in sizes], rates, "k-o", ms=3, label="copy (measured)")
    markers = "sD^vP*X"
    for k, (name, (nbytes, gbps, _)) in enumerate(points.items()):
        left.plot(nbytes / 2**20, gbps, markers[k % len(markers)], ms=7, label=name)
    left.set_xscale("log")
    left.set_xlabel("working set (MiB read + written)")
    left.set_ylabel("bandwidth (GB/s)")
    left.set_title("Cache staircase and the variants", fontsize=10)
    left.legend(fontsize=7)
    left.grid(True, which="major", alpha=0.3)

    intensity = torch.logspace(-2, 3, 200, dtype=torch.float64)
    fast, slow = max(rates), rates[-1]  # the best cache level, and the largest (DRAM) working set
    for bw, style, label in ((fast, "--", f"cache {fast:.0f} GB/s"), (slow, "-", f"DRAM {slow:.0f} GB/s")):
        right.plot(intensity, torch.clamp(intensity * bw, max=peak_gflops), style, color="k", lw=1, label=label)
    right.axhline(peak_gflops, color="grey", lw=0.8)
    for k, (name, (_, gbps, flop_per_byte)) in enumerate(points.items()):
        right.plot(flop_per_byte, gbps * flop_per_byte, markers[k % len(markers)], ms=7, label=name)
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("arithmetic intensity (FLOP per byte)")
    right.set_ylabel("GFLOP/s")
    right.set_title(
        f"Roofline: matmul roof {peak_gflops:.0f} GFLOP/s, ridge at {peak_gflops / slow:.0f} FLOP/byte", fontsize=10
    )
    right.legend(fontsize=7, loc="lower right")
    right.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    return fig
