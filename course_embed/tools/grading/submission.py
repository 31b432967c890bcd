"""One submission graded: its plan run in a sandbox, then its outputs checked outside, in a process of their own.

Reading and planning a submitted file happen apart, in :mod:`.notebook`'s limited child."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import compare, confine, sandbox
from .compare import Suite, TestResult
from .limits import Limits
from .notebook import ANSWER_TAG, Running, plan, read_apart, read_submission
from .text import bounded

__all__ = [
    "ANSWER_TAG",
    "GRADING_KEY",
    "Graded",
    "Running",
    "grade_file",
    "grade_notebook",
    "grading_seed",
    "plan",
    "read_submission",
]

MAX_NOTES, NOTE_CHARS = 20, 200  # what the sandbox's notes file may put in a row

#: The environment variable holding the instructor's grading key (any text; kept out of what learners get).
GRADING_KEY = "COURSE_EMBED_GRADING_KEY"


def grading_seed(exercise: str, key: str | None = None) -> int:
    """The secret the hidden tests of ``exercise`` draw their inputs from: fixed by the exercise's name and the
    grading ``key`` (default: the environment variable :data:`GRADING_KEY`, empty when unset), so that the same
    notebook gets the same grade every time it is graded, and two learners with the same mistake the same grade.
    A table of the inputs of one key's run is worth nothing under another key."""
    key = os.environ.get(GRADING_KEY, "") if key is None else key
    return int.from_bytes(hashlib.sha256(f"{key}\0{exercise}".encode()).digest()[:8], "big") >> 2


@dataclass
class Graded:
    """One submission's grade: per-test results, and what went wrong (empty when nothing did)."""

    results: list[TestResult] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0


def _send(proc: subprocess.Popen, seed: int) -> subprocess.Popen:
    """Write the grading run's secret seed to the sandbox's stdin (one line), then close it."""
    try:
        proc.stdin.write(f"{seed}\n".encode())
        proc.stdin.close()
    except OSError:  # the sandbox died at once; its exit status says why
        pass
    return proc


#: The most files and folders the sandbox may leave in its output folder (an honest run writes one per test).
MAX_ENTRIES = 2000


def _disk_use(folder: Path, stop_at: int) -> tuple[int, int]:
    """Bytes on disk of everything under ``folder``, folders and links included, and the number of entries;
    links are not followed, and the walk stops once either passes its bound (``stop_at`` bytes, MAX_ENTRIES)."""
    total, entries, todo = 0, 0, [str(folder)]
    while todo and total <= stop_at and entries <= MAX_ENTRIES:
        try:
            with os.scandir(todo.pop()) as listing:
                for entry in listing:
                    entries += 1
                    try:
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
                        if entry.is_dir(follow_symlinks=False):
                            todo.append(entry.path)
                    except OSError:
                        continue
        except OSError:
            continue
    return total, entries


def _wait(proc: subprocess.Popen, work: Path, timeout: float, limits: Limits) -> str:
    """Wait for the sandbox; kill it at the time limit, or when its files on the host (``work``: the outputs and
    what it prints) outgrow the disk limit, in bytes or in number. Returns why it was stopped (empty if it ended
    by itself)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            proc.wait(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
            return ""
        except subprocess.TimeoutExpired:
            used, entries = _disk_use(work, limits.disk)
            if time.monotonic() >= deadline:
                stopped = f"timed out after {timeout:g} s (an infinite loop or a very slow cell?)"
            elif used > limits.disk:
                stopped = limits.note("disk")
            elif entries > MAX_ENTRIES:
                stopped = f"stopped: it wrote more than {MAX_ENTRIES} files and folders into its output folder"
            else:
                continue
            proc.kill()
            proc.wait()
            return stopped


def _log_tail(log: Path, nbytes: int = 8192) -> str:
    """The last lines the sandbox printed (its traceback, when it died), bounded and without control characters."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - nbytes))
            return sandbox.last_lines(f.read().decode("utf-8", "replace"))
    except OSError:
        return ""


def _notes(out: Path) -> list[str]:
    """The runner's notes (``out/cells.json``), read as the outputs are (no link, no pipe, size-capped): at most
    MAX_NOTES, each at most NOTE_CHARS characters, control characters removed. The notebook can write this file,
    so nothing in it is taken as the grader's own observation."""
    try:
        notes = json.loads(compare.read_bytes(out / "cells.json", 2**20) or b"[]")
    except (ValueError, RecursionError):
        return []
    if not isinstance(notes, list):
        return []
    return [bounded(n, NOTE_CHARS) for n in notes[: MAX_NOTES + 1] if isinstance(n, str)]


def _why_stopped(
    returncode: int, notes: list[str], limits: Limits, printed: str, oom: bool, cpu: float | None = None
) -> str:
    """Why a sandbox that was not killed by the grader ended before its last cell: what the grader observed (the
    memory cgroup's kill, the exit status, the CPU seconds ``cpu`` the sandbox used, the last lines printed), else
    what the notebook's run reported."""
    if oom:
        return limits.note("memory", together=True)
    if returncode == 128 + signal.SIGXCPU:  # bwrap exits with 128 + the signal that ended its child
        if cpu is not None and cpu < limits.cpu_time:  # no process of it can have used the limit
            return (
                f"the notebook's process ended with exit status {returncode} after {cpu:.0f} s of CPU time in all, "
                f"below the CPU time limit ({limits.cpu_time} s per process), so no limit stopped it; its last "
                f"output: {printed or '(nothing)'}"
            )
        return (
            f"the sandbox exited with status {returncode}, which the CPU time limit gives, after "
            f"{'an unknown amount' if cpu is None else f'{cpu:.0f} s'} of CPU time: {limits.note('cpu-time')}"
        )
    kinds = [n.split(":", 1)[1] for n in notes if n.startswith("limit:") and n.split(":", 1)[1] in limits.kinds()]
    if kinds:
        return f"as the notebook's run reported, {limits.note(kinds[-1])}"
    if returncode == 0:
        return "the run ended without its notes (the notebook removed or replaced them in its output folder)"
    return f"the notebook's process died (exit status {returncode}); its last output: {printed or '(nothing)'}"


def _start(work: Path, out, limits: Limits, running: Running | None, cgroup: confine.MemoryCgroup, seed: int,
           uid: int):  # fmt: skip
    """Start the sandbox (registered in ``running``) as the user ``uid`` (grading as root) and hand it ``seed`` on
    its stdin; ``None`` when the batch was interrupted."""
    if os.geteuid() == 0:
        os.chown(work / "out", uid, uid)  # the one folder the submission's user writes
    command = cgroup.wrap(sandbox.python(work, "runner.py", limits, uid))

    def start():
        return sandbox.popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.PIPE)

    proc = start() if running is None else running.start(start)
    return None if proc is None else _send(proc, seed)


def grade_notebook(
    nb: dict, suite: Suite, timeout: float = 300.0, running: Running | None = None, limits: Limits | None = None
) -> Graded:
    """Run ``nb`` (a notebook the caller already holds) in a sandbox, then check its outputs here, in a process of
    their own; never raises for a broken notebook. A submitted file is graded with :func:`grade_file` instead.

    The sandbox is killed after ``timeout`` seconds, and runs under ``limits`` (:class:`.limits.Limits`; default
    ``Limits()``); tests of questions answered before a time or resource limit stopped it are still graded.
    Raises :class:`.sandbox.SandboxUnavailable` when bubblewrap cannot run.
    """
    limits = limits or Limits()

    def write_plan(path: Path) -> str:
        path.write_text(json.dumps({"steps": plan(nb), "limits": limits.rlimits()}))
        return ""

    return _grade(write_plan, suite, timeout, running, limits)


def grade_file(
    path: Path, suite: Suite, timeout: float = 300.0, running: Running | None = None, limits: Limits | None = None
) -> Graded:
    """:func:`grade_notebook` for a submitted file (``.ipynb`` or an exported ``.zip``): read and planned in a
    limited child process (:func:`.notebook.read_apart`), never in this one; a file that cannot be read, or that
    was made for another exercise, gets its error without a sandbox."""
    limits = limits or Limits()

    def write_plan(plan_path: Path) -> str:
        found = read_apart(path, plan_path, limits.rlimits(), running)
        if found.error:
            return found.error
        if found.exercise != suite.exercise:
            return (
                f"wrong exercise: this notebook is for {found.exercise}, not {suite.exercise}"
                if found.exercise
                else f"not an exercise notebook: it has no otter assignment name "
                f"(start from exercises/{suite.exercise}.ipynb)"
            )
        return ""

    return _grade(write_plan, suite, timeout, running, limits)


def _grade(write_plan, suite: Suite, timeout: float, running: Running | None, limits: Limits) -> Graded:
    """Grade the notebook whose plan ``write_plan(path)`` writes (returning an error, or "" when it wrote it)."""
    sandbox.require_bwrap()
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="course-embed-grade-"))
    cgroup = confine.MemoryCgroup(limits.memory, work.name)
    uid, on_tmpfs = confine.sandbox_uid(), False
    seed = grading_seed(suite.exercise)  # the hidden tests' inputs: the same in every grading run of this key
    try:
        sandbox.prepare(work, suite.sources)
        on_tmpfs = sandbox.mount_outputs(work / "out", limits.disk, 8 * MAX_ENTRIES, uid)  # the walk counts entries
        refused = write_plan(work / "plan.json")
        if refused:
            return Graded(error=refused, seconds=time.monotonic() - start)
        log = work / "sandbox.log"
        with open(log, "wb") as out:
            proc = _start(work, out, limits, running, cgroup, seed, uid)
            if proc is None:
                return Graded(error="interrupted")
            try:
                stopped = _wait(proc, work, timeout, limits)
            finally:
                if running is not None:
                    running.discard(proc)
        notes = _notes(work / "out")
        if not stopped and notes[-1:] != ["finished"]:
            cpu = cgroup.cpu_seconds()  # of every process of the sandbox, where a cgroup counts them
            stopped = _why_stopped(proc.returncode, notes, limits, _log_tail(log), cgroup.oom_killed(), cpu)
        results, unchecked = compare.score_apart(suite, work / "out", stopped, running, seed=seed)
        if not stopped and cgroup.oom_killed():  # one of its processes was killed, the run went on
            stopped = limits.note("memory", together=True)
        errors = [bounded(stopped, 800)] if stopped else []
        if unchecked and unchecked != stopped:
            errors.append(unchecked)  # a check stopped at its own limit: an error, never a silent 0
        reported = [n for n in notes[:MAX_NOTES] if n != "finished" and not n.startswith("limit:")]
        if len(notes) > MAX_NOTES:
            reported.append(f"(more than {MAX_NOTES} notes; the rest left out)")
        if reported:
            errors.append("the notebook's run reported: " + "; ".join(reported))
        return Graded(results, "; ".join(errors), time.monotonic() - start)
    finally:
        if on_tmpfs:
            sandbox.unmount_outputs(work / "out")
        cgroup.remove()
        shutil.rmtree(work, ignore_errors=True)
