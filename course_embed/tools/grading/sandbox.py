"""The sandbox one submission runs in: bubblewrap (``bwrap``), no network, nothing of the repository.

What the submission's processes see: the system's ``/usr`` (and ``/lib*``, ``/bin``) and this Python's prefix,
read-only; fresh ``/proc`` and ``/dev``; a private ``/tmp`` and ``/dev/shm``; and ``/work``, the notebook's folder,
holding, read-only, the notebook's cells, the runner, the *gathering* halves of the tests and a stub
``course_embed`` (``setup`` and the test runtime only: none of the functions the questions ask for), and
``/work/out``, the one folder of the host it writes to (the outputs). ``/tmp``, ``/dev/shm`` and ``/work`` are tmpfs
of a fixed size, and the runner sets the other resource limits of :mod:`.limits` before the first cell runs. The
repository, the solutions, the hidden checks, the home folder and the gradebook are not mounted at all, and the real
``course_embed`` is hidden under an empty tmpfs if it is installed inside a mounted folder.

Namespaces: ``--unshare-all`` (user, PID, network, IPC, UTS, cgroup), so there is no network but loopback, and
``--die-with-parent``: when the grader kills the sandbox (time limit) or exits, the sandbox's PID 1 dies and the
kernel ends every process in the namespace, double-forked and ``setsid`` ones included.

Needs: Debian's ``bubblewrap`` package and unprivileged user namespaces (the default on Debian 11+ and in most
containers; Ubuntu 24.04 restricts them through AppArmor). :func:`require_bwrap` says what is missing and how to fix
it.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from .limits import Limits

GRADING_DIR = Path(__file__).resolve().parent
PACKAGE_DIR = GRADING_DIR.parents[1]  # course_embed/


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create its namespaces here."""


def _system_mounts() -> list[str]:
    """bwrap arguments that make the system's programs and libraries (and this Python) visible, read-only."""
    args = []
    for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / top
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for etc in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives"):
        if (Path("/etc") / etc).exists():
            args += ["--ro-bind", f"/etc/{etc}", f"/etc/{etc}"]
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    for prefix in sorted(prefixes):
        if not prefix.startswith("/usr/"):
            args += ["--ro-bind", prefix, prefix]
    exe = os.path.realpath(sys.executable)
    if not any(exe.startswith(p + os.sep) for p in prefixes | {"/usr"}):
        args += ["--ro-bind", exe, exe]
    # hide the real course_embed (and the repository around it) wherever a mount above makes it visible
    for hidden in (PACKAGE_DIR, PACKAGE_DIR.parent / "exercises"):
        real = os.path.realpath(hidden)
        if any(real.startswith(p + os.sep) for p in prefixes | {"/usr"}) and os.path.isdir(real):
            args += ["--tmpfs", real]
    return args


def command(work: Path, argv: list[str], limits: Limits | None = None) -> list[str]:
    """The ``bwrap`` command line running ``argv`` in the sandbox, in ``/work``.

    ``/work`` is a tmpfs of ``limits.disk`` bytes (as are ``/tmp`` and ``/dev/shm``; unsized where
    :func:`sized_tmpfs` says bwrap cannot), holding what ``work`` holds, read-only, except ``work/out``, the one
    folder of the host the sandbox writes to (the answers' outputs).
    """
    size = str((limits or Limits()).disk)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/work",
        "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONWARNINGS": "ignore",
        "LANG": "C.UTF-8",
        "COURSE_EMBED_DEVICE": os.environ.get("COURSE_EMBED_DEVICE", "cpu"),
    }
    args = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    args += _system_mounts()
    sized = ["--size", size] if sized_tmpfs() else []
    args += ["--proc", "/proc", "--dev", "/dev", *sized, "--tmpfs", "/dev/shm"]
    args += [*sized, "--tmpfs", "/tmp", *sized, "--tmpfs", "/work"]
    for path in sorted(work.iterdir()):
        if path.name != "sandbox.log":
            args += ["--bind" if path.name == "out" else "--ro-bind", str(path), f"/work/{path.name}"]
    return args + ["--chdir", "/work", "--", *argv]


@functools.cache
def sized_tmpfs() -> bool:
    """Whether this ``bwrap`` can give a tmpfs a size (``--size``: bubblewrap 0.7 and later, and not setuid)."""
    path = shutil.which("bwrap")
    if path is None or os.stat(path).st_mode & stat.S_ISUID:
        return False
    try:
        return "--size" in subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False


def python(work: Path, script: str, limits: Limits | None = None) -> list[str]:
    """The command running ``/work/<script>`` with this Python, isolated from the environment (``-I``)."""
    return command(work, [os.path.realpath(sys.executable), "-I", f"/work/{script}"], limits)


@functools.cache
def require_bwrap() -> str:
    """Check once that bubblewrap can run a sandbox here; raise :class:`SandboxUnavailable` saying the fix."""
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable(
            "grading runs every submission in a bubblewrap sandbox, and `bwrap` is not installed: install Debian's "
            "`bubblewrap` package (sudo apt-get install bubblewrap) and run the command again"
        )
    with tempfile.TemporaryDirectory(prefix="course-embed-probe-") as empty:
        probe = command(Path(empty), [os.path.realpath(sys.executable), "-I", "-c", "print('ok')"])
        try:
            done = subprocess.run(probe, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired as err:
            raise SandboxUnavailable("`bwrap` did not start a sandbox within 120 s") from err
    if done.returncode != 0 or done.stdout.strip() != "ok":
        raise SandboxUnavailable(
            f"`bwrap` cannot create a sandbox here: {done.stderr.strip()[:300] or done.returncode}. It needs "
            f"unprivileged user namespaces: on Debian `sudo sysctl -w kernel.unprivileged_userns_clone=1`, on "
            f"Ubuntu 24.04 `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`; in Docker, run the "
            f"container with `--security-opt seccomp=unconfined --security-opt apparmor=unconfined`"
        )
    return "ok"


def _stub_init() -> str:
    return (
        '"""course_embed as a submission sees it while graded: `setup` only (the answers are the learner\'s)."""\n'
        "from .runtime import pick_device, setup\n"
    )


def prepare(work: Path, spec_files: dict[str, str], plan: str) -> None:
    """Fill ``work`` (empty) with what the sandbox gets: runner, plan, gathering halves, stub package."""
    lib = work / "lib" / "course_embed"
    (lib / "tools" / "grading").mkdir(parents=True)
    (lib / "__init__.py").write_text(_stub_init())
    shutil.copy(PACKAGE_DIR / "runtime.py", lib / "runtime.py")
    (lib / "tools" / "__init__.py").write_text("")
    (lib / "tools" / "grading" / "__init__.py").write_text("")
    shutil.copy(GRADING_DIR / "probe.py", lib / "tools" / "grading" / "probe.py")
    shutil.copy(GRADING_DIR / "runner.py", work / "runner.py")
    (work / "probes").mkdir()
    for name, text in spec_files.items():
        (work / "probes" / f"{name}.py").write_text(text)
    (work / "plan.json").write_text(plan)
    (work / "out").mkdir()
