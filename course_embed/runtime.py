"""Where and how chapters run: device choice, seeding and deterministic settings (one thread for a fixed order of sums).

Chapters call :func:`setup` once at the top so that every stored output reproduces under nbval.
"""

from __future__ import annotations

import contextlib
import os
import random

import numpy as np
import torch

from .checks import check_size

DEVICE_ENV = "COURSE_EMBED_DEVICE"


def pick_device(preferred: str | None = None) -> torch.device:
    """The device chapters and benchmarks run on.

    Order: ``preferred`` if given, else the ``COURSE_EMBED_DEVICE`` environment variable (e.g. ``cpu``,
    ``cuda``, ``cuda:1``), else CUDA when available, else CPU.

    Shapes:
        no tensors: a name in, a ``torch.device`` out.

    Example:
        >>> import course_embed as ce
        >>> ce.pick_device("cpu")
        device(type='cpu')
    """
    choice = preferred or os.environ.get(DEVICE_ENV)
    if not choice:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    source = "preferred" if preferred else DEVICE_ENV
    try:
        device = torch.device(choice)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"{source}={choice!r} is not a device name; use 'cpu', 'cuda' or 'cuda:N'") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        fix = "pass 'cpu' or None" if preferred else "unset it or set it to 'cpu'"
        raise ValueError(
            f"{source}={choice!r} asks for CUDA, but torch.cuda.is_available() is False "
            f"(torch {torch.__version__}); {fix}"
        )
    return device


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and PyTorch (all devices); return a CPU generator seeded with ``seed`` too.

    Shapes:
        no tensors: an int in, a ``torch.Generator`` out.

    Example:
        >>> import torch, course_embed as ce
        >>> first = torch.rand(3, generator=ce.seed_everything(7))
        >>> bool(torch.equal(torch.rand(3, generator=ce.seed_everything(7)), first))  # same seed, same numbers
        True
    """
    seed = check_size(seed, "seed", minimum=0)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return torch.Generator().manual_seed(seed)


def deterministic(seed: int = 0) -> torch.Generator:
    """Seed everything and ask PyTorch for deterministic kernels (raising where none exists).

    Shapes:
        no tensors: an int in, the ``torch.Generator`` of :func:`seed_everything` out.

    Example:
        >>> import torch, course_embed as ce
        >>> gen = ce.deterministic(seed=0)
        >>> torch.are_deterministic_algorithms_enabled()
        True
        >>> torch.use_deterministic_algorithms(False)  # PyTorch's default again
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # required by deterministic cuBLAS
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    return seed_everything(seed)


def setup(seed: int = 0) -> torch.device:
    """Notebook preamble: deterministic settings, seeds, and the device from :func:`pick_device`.

    Shapes:
        no tensors: an int in, a ``torch.device`` out.

    Example:
        >>> import torch, course_embed as ce
        >>> device = ce.setup(seed=0)  # the first line of every chapter
        >>> first = torch.randn(3, device=device)
        >>> _ = ce.setup(seed=0)
        >>> bool(torch.equal(torch.randn(3, device=device), first))  # the same seed, the same numbers
        True
        >>> torch.use_deterministic_algorithms(False)  # PyTorch's default again
    """
    deterministic(seed)
    return pick_device()


@contextlib.contextmanager
def single_thread():
    """Run the block with one intra-op thread (a fixed summation order), then restore the thread count.

    Shapes:
        no tensors: a context manager.

    Example:
        >>> import torch, course_embed as ce
        >>> before = torch.get_num_threads()
        >>> with ce.single_thread():
        ...     torch.get_num_threads()
        1
        >>> torch.get_num_threads() == before
        True
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
