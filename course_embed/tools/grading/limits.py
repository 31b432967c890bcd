"""What one submission may use: memory, file sizes, disk, processes and CPU time, and the note when it hits one.

Each limit is a kernel resource limit set by the runner inside the sandbox, for the runner and every process it
starts, before the first cell runs (hard and soft alike, so the notebook cannot raise it), or the size of a tmpfs:

* ``memory``: ``RLIMIT_AS``, the address space of *each* process. Linux enforces no limit on resident memory per
  process (``RLIMIT_RSS`` is ignored), and resident memory never exceeds the address space, so this is the bound
  that holds; an allocation beyond it fails at once (``MemoryError``, torch's "can't allocate memory"). A solution
  notebook peaks at 0.82 GiB of address space (0.33 GiB resident) on CPU. Where the grader can create a memory
  cgroup, the sandbox's processes and tmpfs pages *together* are bounded by the same value too
  (:class:`.confine.MemoryCgroup`).
* ``file_size``: ``RLIMIT_FSIZE``, the largest file a process may write (``OSError: File too large``).
* ``disk``: the size of each writable folder: ``/work`` (the notebook's folder), ``/tmp`` and ``/dev/shm`` are
  tmpfs of this size (in memory, so they count towards the machine's memory; unsized where bwrap is older than 0.7
  or setuid, see :func:`.sandbox.sized_tmpfs`); grading as root, the outputs folder (the one that outlives the
  sandbox) is a tmpfs of this size too (:func:`.sandbox.mount_outputs`), so files unlinked while open count; and
  the grader stops the sandbox when its files on the host (the answers' outputs and what it prints) grow past it.
* ``processes``: ``RLIMIT_NPROC``, processes and threads in the sandbox (its own user namespace, or, graded as
  root, its own user id: the instructor's other processes do not count). The kernel exempts only user id 0, which
  the sandbox never is (:func:`.confine.sandbox_uid`).
* ``cpu_time``: ``RLIMIT_CPU``, CPU seconds of each process, a backstop to the wall-clock ``timeout``. Where a
  cgroup counts the sandbox's CPU time (:class:`.confine.CpuCgroup`), the grader takes the exit status this limit
  gives (152) as the limit's only when the sandbox used that much CPU time.

These are limits per process: a notebook may start up to ``processes`` processes of ``memory`` each. Only a
cgroup bounds their sum: the sandbox's own where one can be made, else the whole batch's (e.g. under
``systemd-run --user --scope -p MemoryMax=16G -p TasksMax=512``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

MiB, GiB = 2**20, 2**30

#: How the note describes each limit and its value; the key is also the option that raises it (``--memory``).
_WHAT = {
    "memory": "memory limit ({} of address space per process)",
    "file-size": "file size limit ({} per file)",
    "disk": "disk limit ({} per writable folder)",
    "processes": "process limit ({} processes and threads)",
    "cpu-time": "CPU time limit ({} CPU seconds per process)",
}


def parse_size(text: str, name: str = "size") -> int:
    """Bytes from ``"4G"``, ``"512M"``, ``"100K"`` or a plain number of bytes; ``ValueError`` naming ``name``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?B)?\s*", str(text))
    if not match:
        raise ValueError(f"{name} must be a size such as 4G, 512M or 100K (bytes), got {text!r}")
    value = float(match.group(1)) * 1024 ** " KMGT".index((match.group(2) or " ").upper())
    if value < 1:
        raise ValueError(f"{name} must be at least 1 byte, got {text!r}")
    return int(value)


def format_size(nbytes: int) -> str:
    """``4 GiB``, ``512 MiB``, ``100 KiB`` or ``N bytes``: the size as written in notes and help."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / size:.4g} {unit}"
    return f"{nbytes} bytes"


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandbox (bytes, a count, seconds); the defaults leave a solution ample headroom."""

    memory: int = 4 * GiB
    file_size: int = 256 * MiB
    disk: int = 512 * MiB
    processes: int = 64
    cpu_time: int = 600

    def __post_init__(self):
        for name in (f.name for f in fields(self)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"the sandbox's {name} limit (--{name.replace('_', '-')}) must be a positive integer, got {value!r}"
                )
        if self.memory < GiB:
            raise ValueError(
                f"the sandbox's memory limit (--memory) must be at least 1G (importing torch alone takes about "
                f"0.6 GiB of address space), got {format_size(self.memory)}"
            )

    def rlimits(self) -> dict[str, int]:
        """The resource limits the runner sets, by the name of their constant in :mod:`resource`."""
        return {
            "RLIMIT_AS": self.memory,
            "RLIMIT_FSIZE": self.file_size,
            "RLIMIT_NPROC": self.processes,
            "RLIMIT_CPU": self.cpu_time,
        }

    @staticmethod
    def kinds() -> tuple[str, ...]:
        """The kinds of limit a note may name: ``memory``, ``file-size``, ``disk``, ``processes``, ``cpu-time``."""
        return tuple(_WHAT)

    def value(self, kind: str) -> str:
        """The limit ``kind`` (``memory``, ``file-size``, ``disk``, ``processes``, ``cpu-time``) as written."""
        return _written(kind, getattr(self, kind.replace("-", "_")))

    def note(self, kind: str, together: bool = False) -> str:
        """The gradebook's note for a submission stopped at the limit ``kind``: which, its value, how to raise it
        (``together``: the memory of all the sandbox's processes, which its cgroup bounds)."""
        doubled = _written(kind, 2 * getattr(self, kind.replace("-", "_")))
        raised = doubled.replace(" ", "").replace("iB", "") if kind in _SIZES else doubled  # 8 GiB -> 8G
        what = "memory limit ({} for all its processes together)" if together else _WHAT[kind]
        return (
            f"stopped at the sandbox's {what.format(self.value(kind))}; to allow more, grade again with "
            f"course-embed grade --{kind} {raised}"
        )


_SIZES = ("memory", "file-size", "disk")  # the limits given in bytes


def _written(kind: str, value: int) -> str:
    return format_size(value) if kind in _SIZES else str(value)
