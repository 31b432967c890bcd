"""Shared command line, machine description and RoPE reference for the benchmark scripts (run them from the
repository root)."""

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
    ``--quick``, and the script's own ``extra`` options, ``[(flag, add_argument keywords)]``.

    ``--quick`` is a smoke test, not a measurement: tiny shapes (each script picks its own), 3 rounds unless
    ``--rounds`` says otherwise, and blocks of about 1 ms (``args.block_seconds``; 20 ms otherwise).
    """
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
    parser.add_argument(
        "--rounds", type=int, default=None, help="interleaved timing rounds (default 11, 3 with --quick)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: tiny shapes, 3 rounds, 1 ms blocks (checks that the script runs; its numbers mean nothing)",
    )
    parser.add_argument(
        "--keep-memory",
        action="store_true",
        help="restart with glibc keeping freed memory, so fresh outputs cost no page faults",
    )
    args = parser.parse_args()
    if args.keep_memory and any(os.environ.get(k) != v for k, v in KEEP_MEMORY.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], os.environ | KEEP_MEMORY)  # tunables act at start-up
    if args.rounds is None:
        args.rounds = 3 if args.quick else 11
    args.block_seconds = 0.001 if args.quick else 0.02
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


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(..., h_d)`` -> ``(..., h_d)``: ``[-x2, x1]`` for halves ``x1, x2``, as in Hugging Face's LLaMA."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def hf_cos_sin(
    seq_len: int, head_dim: int, device: str, dtype: torch.dtype = torch.float32, base: float = 10000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's RoPE tables, cos and sin ``(s, h_d)`` each: the angles ``position * theta_i`` with
    ``theta_i = base**(-2i / h_d)``, each frequency twice (the rotate_half layout), in float64, then cast to
    ``dtype``. ``q * cos + rotate_half(q) * sin`` is then HF's rotation."""
    frequencies = base ** -(torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (h_d / 2,)
    angles = torch.arange(seq_len, dtype=torch.float64)[:, None] * frequencies  # (s, h_d / 2)
    angles = torch.cat((angles, angles), dim=-1)  # (s, h_d)
    return angles.cos().to(device=device, dtype=dtype), angles.sin().to(device=device, dtype=dtype)
