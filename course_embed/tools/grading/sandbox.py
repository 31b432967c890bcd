"""The sandbox one submission runs in: bubblewrap (``bwrap``), no network, nothing of the repository.

What the submission's processes see: the system's ``/usr`` (and ``/lib*``, ``/bin``) and the grader's own Python
environment (its venv or conda prefix, the interpreter it was made from, its site-packages: :func:`environment`),
read-only; fresh ``/proc`` (``/proc/sys`` read-only) and a read-only ``/dev``; a private ``/tmp`` and ``/dev/shm``;
and ``/work``, the notebook's folder, holding, read-only, the notebook's cells, the runner, the *gathering* halves of
the tests and a stub ``course_embed`` (``setup`` and the test runtime only: none of the functions the questions ask
for), and ``/work/out``, the one folder of the host it writes to (the outputs; grading as root, a tmpfs of the
``--disk`` size that the grader mounts there, :func:`mount_outputs`). ``/tmp``, ``/dev/shm`` and
``/work`` are tmpfs of a fixed size, ``/`` is read-only, and the runner sets the other resource limits of
:mod:`.limits` before the first cell runs. The repository, the solutions, the hidden checks, the home folder and the
gradebook are not mounted at all, and the real ``course_embed`` (and the repository around it) is hidden under an
empty read-only tmpfs wherever the environment's folders hold it (an editable install's finder then finds nothing).

Namespaces: PID, network, IPC, UTS and cgroup, so there is no network but loopback, and ``--die-with-parent``: when
the grader kills the sandbox (time limit) or exits, the sandbox's PID 1 dies and the kernel ends every process in
the namespace, double-forked and ``setsid`` ones included. As an ordinary user, a user namespace too (bubblewrap maps
the sandbox's user to yours); as root, none (it would map the sandbox's user to root): the submission runs as a user
id of its own without capabilities (:mod:`.confine`). Either way a seccomp filter refuses nested user namespaces.

Needs: Debian's ``bubblewrap`` package (0.8 or later for ``--disable-userns``) and, as an ordinary user,
unprivileged user namespaces (the default on Debian 11+ and in most containers; Ubuntu 24.04 restricts them through
AppArmor). :func:`require_bwrap` says what is missing and how to fix it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from . import confine
from .limits import Limits
from .text import plain

GRADING_DIR = Path(__file__).resolve().parent
PACKAGE_DIR = GRADING_DIR.parents[1]  # course_embed/


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create its namespaces here."""


def _system_mounts() -> list[str]:
    """bwrap arguments that make the system's programs and libraries visible, read-only."""
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
    return args


_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def _inside(path: str, folders) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def environment() -> list[tuple[str, str]]:
    """The folders of the Python environment the grader runs in, as ``(real path, path the sandbox sees)`` pairs.

    Its prefixes (``sys.prefix``: a venv or conda environment; ``sys.base_prefix``: the interpreter it was made
    from) and its site-packages, at their real paths and, where a path goes through a symbolic link, also where
    this Python sees them; the system folders (``/usr``) are mounted anyway. The outermost folders only.
    """
    wanted = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages()]
    wanted.append(os.path.dirname(os.path.abspath(sys.executable)))
    wanted += [p for p in sys.path if os.path.isdir(p) and any(Path(p).glob("*.dist-info"))]  # .pth-added sites
    pairs = set()
    for path in wanted:
        if path and os.path.isdir(path):
            real, seen = os.path.realpath(path), os.path.abspath(path)
            pairs.update((real, where) for where in {real, seen})
    pairs = {(real, seen) for real, seen in pairs if not _inside(seen, _SYSTEM)}
    outer = sorted(pairs, key=lambda pair: (len(pair[1]), pair))
    kept: list[tuple[str, str]] = []
    for real, seen in outer:
        if not _inside(seen, [s for _, s in kept]):
            kept.append((real, seen))
    return kept


def _hidden() -> list[str]:
    """What must stay invisible even where the environment's folders hold it: the real ``course_embed`` and the
    repository around it (its solutions and hidden tests), unless that folder is the environment's own."""
    hidden = [os.path.realpath(PACKAGE_DIR)]
    repo = os.path.realpath(PACKAGE_DIR.parent)
    if repo not in {os.path.realpath(p) for p in site.getsitepackages()} and (Path(repo) / "exercises").is_dir():
        hidden.append(repo)
    return hidden


def work_folder(env: list[tuple[str, str]] | None = None) -> str:
    """Where the sandbox sees the notebook's folder: ``/work``, unless the environment lives there."""
    env = environment() if env is None else env
    for candidate in ("/work", "/course-embed-work", "/course-embed-work-2"):
        if not any(_inside(seen, [candidate]) or _inside(candidate, [seen]) for _, seen in env):
            return candidate
    raise SandboxUnavailable(f"this Python environment ({sys.prefix}) covers every folder the sandbox can use")


def _environment_mounts(env: list[tuple[str, str]], work: str) -> list[str]:
    """bwrap arguments binding the environment read-only (after the tmpfs mounts, so none of them covers it), then
    hiding the repository wherever the environment makes it visible, then re-binding the environment's folders
    that lie inside what was hidden (a ``.venv`` inside the repository)."""
    args = []
    seen_paths = [seen for _, seen in env]
    parents = {str(parent) for seen in seen_paths for parent in Path(seen).parents if str(parent) != "/"}
    for parent in sorted(parents):  # created 0755, as bwrap would copy the host's mode (/root, pytest's: 0700)
        if parent not in ("/tmp", "/dev", "/proc", work) and not _inside(parent, [*_SYSTEM, "/proc"]):
            args += ["--perms", "0755", "--dir", parent]
    for real, seen in env:
        args += ["--ro-bind", real, seen]
    for hidden in _hidden():
        if _inside(hidden, seen_paths):
            args += ["--tmpfs", hidden]  # empty, and read-only once what it must show is bound
            for real, seen in env:
                if _inside(seen, [hidden]) and seen != hidden:
                    inner = [
                        str(p) for p in reversed(Path(seen).parents) if _inside(str(p), [hidden]) and str(p) != hidden
                    ]
                    args += [arg for parent in inner for arg in ("--perms", "0755", "--dir", parent)]
                    args += ["--ro-bind", real, seen]
            args += ["--remount-ro", hidden]
    return args


def command(work: Path, argv: list[str], limits: Limits | None = None, uid: int | None = None) -> list[str]:
    """The ``bwrap`` command line running ``argv`` in the sandbox, in :func:`work_folder` (``/work``).

    ``/work`` is a tmpfs of ``limits.disk`` bytes (as are ``/tmp`` and ``/dev/shm``; unsized where
    :func:`sized_tmpfs` says bwrap cannot), holding what ``work`` holds, read-only, except ``work/out``, the one
    folder of the host the sandbox writes to (the answers' outputs). The Python environment is bound after these
    tmpfs, so that one living under ``/tmp`` or ``/work`` stays visible. ``/``, ``/dev`` and ``/proc/sys`` are
    read-only. Run by root, ``argv`` runs as the user id ``uid`` (see :func:`.confine.sandbox_uid`), without
    capabilities; start the command with :func:`popen`, which adds the seccomp filter.
    """
    size = str((limits or Limits()).disk)
    env_folders = environment()
    inside = work_folder(env_folders)
    root = os.geteuid() == 0
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": inside,
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": "/tmp",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONWARNINGS": "ignore",
        "LANG": "C.UTF-8",
        "COURSE_EMBED_DEVICE": os.environ.get("COURSE_EMBED_DEVICE", "cpu"),
    }
    if root:  # bubblewrap would map the sandbox's user to root: no user namespace, an unprivileged user id instead
        args = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    else:
        args = ["bwrap", "--unshare-all", "--unshare-user"]
        args += ["--disable-userns"] if "--disable-userns" in _bwrap_help() else []  # 0.8+; seccomp refuses anyway
    args += ["--die-with-parent", "--new-session", "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    args += _system_mounts()
    args += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev", "--remount-ro", "/dev"]
    sized = ["--size", size] if sized_tmpfs() else []
    shared = ["--perms", "1777"] if root else []  # root's tmpfs, written by the sandbox's user
    for folder in ("/dev/shm", "/tmp", inside):
        args += [*sized, *shared, "--tmpfs", folder]
    for path in sorted(work.iterdir()):
        if path.name != "sandbox.log":
            args += ["--bind" if path.name == "out" else "--ro-bind", str(path), f"{inside}/{path.name}"]
    args += _environment_mounts(env_folders, inside)
    args += ["--remount-ro", "/", "--chdir", inside, "--"]
    if root:
        if uid is None:
            raise ValueError("grading as root, the sandbox needs a user id (uid) to run the submission as")
        args += [_setpriv(), "--reuid", str(uid), "--regid", str(uid), "--clear-groups", "--inh-caps=-all"]
        args += ["--bounding-set=-all", "--"]
    return args + argv


def _setpriv() -> str:
    found = shutil.which("setpriv") or ("/usr/bin/setpriv" if os.path.exists("/usr/bin/setpriv") else None)
    if found is None or not found.startswith("/usr/"):
        raise SandboxUnavailable(
            "grading as root, the sandbox runs each submission as an unprivileged user with `setpriv`, which is "
            "missing: install Debian's `util-linux` package, or grade as an ordinary user"
        )
    return found


def popen(argv: list[str], **kwargs) -> subprocess.Popen:
    """Start a :func:`command` with the seccomp filter that refuses new user namespaces
    (:func:`.confine.no_user_namespaces`)."""
    program = confine.no_user_namespaces()
    if program is None:
        if os.geteuid() == 0:
            raise SandboxUnavailable(
                "grading as root needs a seccomp filter this grader has only for x86-64 and arm64 machines: grade "
                "as an ordinary user"
            )
        return subprocess.Popen(argv, **kwargs)
    read, write = os.pipe()
    try:
        os.write(write, program)
        os.close(write)
        bwrap = argv.index("bwrap")
        argv = [*argv[: bwrap + 1], "--seccomp", str(read), *argv[bwrap + 1 :]]
        return subprocess.Popen(argv, pass_fds=(read,), **kwargs)
    finally:
        os.close(read)


@functools.cache
def _bwrap_help() -> str:
    path = shutil.which("bwrap")
    try:
        return subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60).stdout if path else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


@functools.cache
def sized_tmpfs() -> bool:
    """Whether this ``bwrap`` can give a tmpfs a size (``--size``: bubblewrap 0.7 and later, and not setuid)."""
    path = shutil.which("bwrap")
    if path is None or os.stat(path).st_mode & stat.S_ISUID:
        return False
    return "--size" in _bwrap_help()


def python(work: Path, script: str, limits: Limits | None = None, uid: int | None = None) -> list[str]:
    """The command running ``<work folder>/<script>`` with the grader's own Python (``sys.executable`` as it is, so
    that a venv's ``pyvenv.cfg`` is read), isolated from the environment variables and user site (``-I``)."""
    return command(work, [os.path.abspath(sys.executable), "-I", f"{work_folder()}/{script}"], limits, uid)


_PROBE = """import sys
sys.path.insert(0, sys.argv[1])
import torch
from IPython.core.interactiveshell import InteractiveShell
import course_embed
assert not hasattr(course_embed, "TokenEmbedding"), "the real course_embed is visible in the sandbox"
print("ok", sys.prefix, torch.__version__)
"""


def last_lines(text: str, lines: int = 6, limit: int = 600) -> str:
    """The end of what a process printed, for a note: its last ``lines`` lines, control characters removed,
    whitespace folded, at most ``limit`` characters."""
    tail = [" ".join(plain(line).split()) for line in text.splitlines()[-lines:]]
    joined = " | ".join(line for line in tail if line)
    return joined if len(joined) <= limit else "..." + joined[-(limit - 3) :]


@functools.cache
def require_bwrap() -> str:
    """Check once that bubblewrap can run a sandbox here, with this Python, and that torch and IPython import in it
    exactly as a submission's runner imports them; raise :class:`SandboxUnavailable` saying what is missing and
    the fix."""
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable(
            "grading runs every submission in a bubblewrap sandbox, and `bwrap` is not installed: install Debian's "
            "`bubblewrap` package (sudo apt-get install bubblewrap) and run the command again"
        )
    with tempfile.TemporaryDirectory(prefix="course-embed-probe-") as empty:
        work = Path(empty)
        prepare(work, {}, "{}")
        (work / "probe.py").write_text(_PROBE)
        probe = python(work, "probe.py", uid=confine.sandbox_uid()) + [f"{work_folder()}/lib"]
        proc = popen(probe, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            stdout, stderr = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired as err:
            proc.kill()
            proc.communicate()
            raise SandboxUnavailable("`bwrap` did not start a sandbox within 300 s") from err
        done = subprocess.CompletedProcess(probe, proc.returncode, stdout, stderr)
    if done.returncode == 0 and done.stdout.startswith("ok "):
        return "ok"
    printed = last_lines(done.stderr or done.stdout, 4, 400) or f"exit status {done.returncode}"
    if "bwrap:" in done.stderr and "Traceback" not in done.stderr:
        raise SandboxUnavailable(
            f"`bwrap` cannot create a sandbox here: {printed}. It needs unprivileged user namespaces: on Debian "
            f"`sudo sysctl -w kernel.unprivileged_userns_clone=1`, on Ubuntu 24.04 `sudo sysctl -w "
            f"kernel.apparmor_restrict_unprivileged_userns=0`; in Docker, run the container with "
            f"`--security-opt seccomp=unconfined --security-opt apparmor=unconfined`"
        )
    raise SandboxUnavailable(
        f"the sandbox runs this Python ({sys.executable}, environment {sys.prefix}) and it cannot start a "
        f"submission's runner there: {printed}. Install the course's requirements into this environment "
        f"(`{sys.executable} -m pip install -r requirements.txt`), or run `course-embed grade` with the Python "
        f"that has them"
    )


def mount_outputs(out: Path, size: int, entries: int, uid: int) -> bool:
    """Grading as root: mount a tmpfs of ``size`` bytes and at most ``entries`` files and folders on ``out`` (the
    one folder the sandbox writes that outlives it), owned by the sandbox's user ``uid``. Everything written there
    counts against its size, files that were unlinked while open or preallocated too, so that a submission can fill
    its own outputs folder, never the host's disk. ``False`` where it cannot be mounted (an ordinary user, no
    ``mount``): the grader then bounds the folder by walking it."""
    mount = shutil.which("mount") or "/usr/bin/mount"
    if os.geteuid() != 0 or not os.path.exists(mount):
        return False
    options = f"size={size},nr_inodes={entries},mode=0700,uid={uid},gid={uid},nosuid,nodev,noexec"
    try:
        done = subprocess.run([mount, "-t", "tmpfs", "-o", options, "course-embed-outputs", str(out)],
                              capture_output=True, timeout=60)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def unmount_outputs(out: Path) -> None:
    """Unmount what :func:`mount_outputs` mounted (lazily: nothing of the sandbox holds it any more)."""
    umount = shutil.which("umount") or "/usr/bin/umount"
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run([umount, "-l", str(out)], capture_output=True, timeout=60)


def _stub_init() -> str:
    return (
        '"""course_embed as a submission sees it while graded: `setup` only (the answers are the learner\'s)."""\n'
        "from .runtime import pick_device, setup\n"
    )


def prepare(work: Path, spec_files: dict[str, str], plan: str | None = None) -> None:
    """Fill ``work`` (empty) with what the sandbox gets: runner, gathering halves, stub package, and ``plan``
    (``plan.json``) when given (a submission's is written by the child that reads it)."""
    lib = work / "lib" / "course_embed"
    (lib / "tools" / "grading").mkdir(parents=True)
    (lib / "__init__.py").write_text(_stub_init())
    for module in ("runtime.py", "checks.py"):  # setup, and the argument checks it uses
        shutil.copy(PACKAGE_DIR / module, lib / module)
    (lib / "tools" / "__init__.py").write_text("")
    (lib / "tools" / "grading" / "__init__.py").write_text("")
    for module in ("probe.py", "text.py"):  # the test runtime, and the quoting it uses
        shutil.copy(GRADING_DIR / module, lib / "tools" / "grading" / module)
    shutil.copy(GRADING_DIR / "runner.py", work / "runner.py")
    (work / "probes").mkdir()
    for name, text in spec_files.items():
        (work / "probes" / f"{name}.py").write_text(text)
    if plan is not None:
        (work / "plan.json").write_text(plan)
    (work / "out").mkdir()
