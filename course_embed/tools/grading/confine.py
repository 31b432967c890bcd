"""What keeps a sandbox's processes from the host's privileges and memory, beyond bubblewrap's namespaces.

* :func:`no_user_namespaces`: a seccomp filter (classic BPF, as ``bwrap --seccomp`` loads it) that refuses to create
  a user namespace (``unshare``/``clone`` with ``CLONE_NEWUSER``; ``clone3`` answers ``ENOSYS``, so that glibc falls
  back to ``clone``). In a nested user namespace a process could mount tmpfs of any size, beyond ``--disk``.
* :func:`sandbox_uid`: grading as root, the submission runs as a user id of its own (no account, no file, no process
  of the host has it), so that the kernel treats it as an ordinary user: ``/proc/sys`` and every root-owned file is
  closed to it, and ``RLIMIT_NPROC`` holds (the kernel exempts user id 0 only).
* :class:`MemoryCgroup`: where the grader may create a cgroup (cgroup v2, or v1's memory controller: a container's
  root, a systemd user slice with delegation), the whole sandbox runs in one whose memory limit is ``--memory``: the
  sum of its processes' memory and of its tmpfs pages, not only each process's address space. Where it cannot, the
  per-process ``RLIMIT_AS`` is the bound (``book/instructors.md`` says how to add a cgroup by hand).
"""

from __future__ import annotations

import itertools
import os
import platform
import struct
import time
from pathlib import Path

#: Per machine: the audit architecture seccomp reports, and the numbers of ``unshare``, ``clone`` and ``clone3``.
_SYSCALLS = {"x86_64": (0xC000003E, 272, 56, 435), "aarch64": (0xC00000B7, 97, 220, 435)}
_CLONE_NEWUSER = 0x10000000


def no_user_namespaces() -> bytes | None:
    """The seccomp program refusing new user namespaces on this machine; ``None`` where its numbers are unknown."""
    if platform.machine() not in _SYSCALLS:
        return None
    audit, unshare, clone, clone3 = _SYSCALLS[platform.machine()]
    load, jeq, jset, jge, ret = 0x20, 0x15, 0x45, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ/JSET/JGE|K, BPF_RET|K
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    program = [
        (load, 0, 0, 4),  # 0: the architecture
        (jeq, 1, 0, audit),  # 1: ours -> 3
        (ret, 0, 0, eperm),  # 2: any other ABI may do nothing
        (load, 0, 0, 0),  # 3: the system call's number
        (jge, 8, 0, 0x40000000),  # 4: x32 -> 13
        (jeq, 3, 0, unshare),  # 5 -> 9
        (jeq, 2, 0, clone),  # 6 -> 9
        (jeq, 4, 0, clone3),  # 7 -> 12
        (ret, 0, 0, allow),  # 8
        (load, 0, 0, 16),  # 9: the low word of the first argument, the flags
        (jset, 2, 0, _CLONE_NEWUSER),  # 10 -> 13
        (ret, 0, 0, allow),  # 11
        (ret, 0, 0, enosys),  # 12
        (ret, 0, 0, eperm),  # 13
    ]
    return b"".join(struct.pack("HBBI", *instruction) for instruction in program)


_UIDS = itertools.count()
UID_BASE = 2_000_000_000  # far above any account's or any rootless container's range


def sandbox_uid() -> int:
    """A user id no other sandbox of this machine runs as now (one per grader process and sandbox)."""
    return UID_BASE + (os.getpid() % 100_000) * 1000 + next(_UIDS) % 1000


def _own_cgroup() -> tuple[Path, str] | None:
    """The folder of this process's memory cgroup and its version (``"2"`` or ``"1"``), if there is one."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").is_file():
            return Path("/sys/fs/cgroup") / path.lstrip("/"), "2"
        if "memory" in controllers.split(","):
            return Path("/sys/fs/cgroup/memory") / path.lstrip("/"), "1"
    return None


class MemoryCgroup:
    """A cgroup for one sandbox whose memory limit is ``limit`` bytes; ``path`` is ``None`` where none can be made.

    The sandbox joins it before bwrap starts (:meth:`wrap`), so every process in it counts; :meth:`oom_killed` says
    whether the kernel killed one at the limit; :meth:`remove` deletes it once the sandbox has ended.
    """

    def __init__(self, limit: int, name: str):
        self.path, self.version = None, ""
        found = _own_cgroup()
        if found is None:
            return
        parent, version = found
        path = parent / name
        try:
            path.mkdir()
        except OSError:
            return
        try:
            if version == "2":
                (path / "memory.max").write_text(str(limit))
                if (path / "memory.swap.max").exists():
                    (path / "memory.swap.max").write_text("0")
            else:
                (path / "memory.limit_in_bytes").write_text(str(limit))
        except OSError:
            path.rmdir()
            return
        self.path, self.version = path, version

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started inside the cgroup (a shell moves itself in, then becomes ``argv``)."""
        if self.path is None:
            return argv
        return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.path), *argv]

    def oom_killed(self) -> bool:
        if self.path is None:
            return False
        try:
            events = (self.path / ("memory.events" if self.version == "2" else "memory.oom_control")).read_text()
        except OSError:
            return False
        words = events.split()
        counts = dict(zip(words[::2], words[1::2], strict=False))
        return counts.get("oom_kill", "0").isdigit() and int(counts.get("oom_kill", "0")) > 0

    def remove(self) -> None:
        if self.path is None:
            return
        for _ in range(50):  # the kernel frees the cgroup once its last process is reaped
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
