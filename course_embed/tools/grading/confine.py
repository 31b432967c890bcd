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
* :class:`CpuCgroup`: where the grader may create one (cgroup v2 with the ``cpu`` controller, or v1's ``cpu``
  controller), the sandbox also runs in a CPU cgroup of its own with the default weight and at most one CPU, so that
  sandboxes share the CPU per sandbox, not per process or per process session: a submission that starts many busy
  processes, each in its own process session (``setsid``), gets one CPU, not the machine, and its neighbour keeps
  its own.
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


def _own_cgroup(controller: str = "memory") -> tuple[Path, str] | None:
    """The folder of this process's cgroup for ``controller`` (``memory``, ``cpu``) and its version (``"2"`` or
    ``"1"``), if there is one."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").is_file():
            return Path("/sys/fs/cgroup") / path.lstrip("/"), "2"
        if controller in controllers.split(","):
            mounted = Path("/sys/fs/cgroup") / controllers
            folder = mounted if mounted.is_dir() else Path("/sys/fs/cgroup") / controller
            return folder / path.lstrip("/"), "1"
    return None


def _child(parent: Path, name: str, limits: dict[str, str], optional: tuple[str, ...] = ()) -> Path | None:
    """The cgroup ``parent/name``, made and given ``limits`` (file name -> value, written in order; a file named in
    ``optional`` only where the kernel offers it); ``None``, and nothing left behind, where either fails."""
    path = parent / name
    try:
        path.mkdir()
    except OSError:
        return None
    try:
        for file, value in limits.items():
            if file not in optional or (path / file).exists():
                (path / file).write_text(value)
    except OSError:
        path.rmdir()
        return None
    return path


def _join(paths: list[Path], argv: list[str]) -> list[str]:
    """``argv`` started inside the cgroups ``paths`` (a shell moves itself into each, then becomes ``argv``)."""
    if not paths:
        return argv
    join = "".join(f'echo $$ > "${i + 1}/cgroup.procs" && ' for i in range(len(paths)))
    return ["/bin/sh", "-c", f'{join}shift {len(paths)} && exec "$@"', "sh", *map(str, paths), *argv]


class CpuCgroup:
    """A cgroup v1 ``cpu`` cgroup for one sandbox: the default weight (every sandbox the same share, however many
    processes or process sessions it starts) and at most one CPU; ``path`` is ``None`` where none can be made (with
    cgroup v2 the sandbox's one cgroup, :class:`MemoryCgroup`, bounds its CPU too, where the controller is given)."""

    def __init__(self, name: str):
        self.path, self.version, self.accounting = None, "", None
        found = _own_cgroup("cpu")
        if found is None:
            return
        parent, version = found
        if version == "2":
            return  # one cgroup holds every controller: MemoryCgroup's sets the CPU limit too
        path = _child(parent, name, {"cpu.shares": "1024", "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "100000"})
        if path is None:
            return
        self.path, self.version = path, version
        self.accounting = path if (path / "cpuacct.usage").exists() else None  # cpu,cpuacct mounted together
        found = None if self.accounting else _own_cgroup("cpuacct")
        if found is not None and found[1] == "1":
            self.accounting = _child(found[0], name, {})

    @property
    def paths(self) -> list[Path]:
        """The cgroups the sandbox joins: the ``cpu`` one, and the ``cpuacct`` one where that is another."""
        return [p for p in dict.fromkeys((self.path, self.accounting)) if p is not None]

    def seconds(self) -> float | None:
        """CPU seconds used by every process that was in the cgroup (``None`` where none counts them)."""
        usage = _read(self.accounting / "cpuacct.usage").strip() if self.accounting else ""
        return int(usage) / 1e9 if usage.isdigit() else None

    def remove(self) -> None:
        for path in reversed(self.paths):
            _remove(path)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _remove(path: Path | None) -> None:
    if path is None:
        return
    for _ in range(50):  # the kernel frees the cgroup once its last process is reaped
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


class MemoryCgroup:
    """A cgroup for one sandbox whose memory limit is ``limit`` bytes; ``path`` is ``None`` where none can be made.

    The sandbox joins it before bwrap starts (:meth:`wrap`), so every process in it counts; :meth:`oom_killed` says
    whether the kernel killed one at the limit; :meth:`remove` deletes it once the sandbox has ended.
    """

    def __init__(self, limit: int, name: str):
        self.path, self.version = None, ""
        self.cpu = CpuCgroup(name)
        found = _own_cgroup()
        if found is None:
            return
        parent, version = found
        if version == "2":  # swap where the kernel counts it; cpu.max where the cpu controller is given to children
            limits = {"memory.max": str(limit), "memory.swap.max": "0", "cpu.max": "100000 100000"}
            path = _child(parent, name, limits, optional=("memory.swap.max", "cpu.max"))
        else:
            path = _child(parent, name, {"memory.limit_in_bytes": str(limit)})
        if path is None:
            return
        self.path, self.version = path, version

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started inside the cgroup, and inside the sandbox's CPU cgroup where there is one (a shell moves
        itself in, then becomes ``argv``)."""
        return _join(list(dict.fromkeys(p for p in (self.path, *self.cpu.paths) if p is not None)), argv)

    def cpu_seconds(self) -> float | None:
        """CPU seconds used by all the sandbox's processes together, observed by the kernel's accounting (cgroup
        v2's ``cpu.stat``, v1's ``cpuacct``); ``None`` where no cgroup of the sandbox counts them."""
        if self.version == "2":
            stat = dict(line.split() for line in _read(self.path / "cpu.stat").splitlines() if len(line.split()) == 2)
            if stat.get("usage_usec", "").isdigit():
                return int(stat["usage_usec"]) / 1e6
        return self.cpu.seconds()

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
        _remove(self.path)
        self.cpu.remove()
