"""One submission: reading it, planning what the sandbox runs, and grading it (sandbox inside, checks outside)."""

from __future__ import annotations

import ast
import io
import json
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from . import compare, confine, sandbox
from .compare import Suite, TestResult
from .limits import Limits
from .text import bounded

ANSWER_TAG = "otter_answer_cell"  # otter assign tags every cell where the learner writes an answer
_CHECK = re.compile(r"""^\s*grader\.check\(\s*["'](\w+)["']\s*\)\s*$""")


#: The largest submission read (a notebook, or the notebook inside a zip, uncompressed): far above any notebook's.
MAX_SUBMISSION_BYTES = 50 * 2**20
MAX_NOTES, NOTE_CHARS = 20, 200  # what the sandbox's notes file may put in a row


def _read_raw(path: Path) -> bytes:
    """The submission's notebook bytes, size-capped; ``ValueError`` saying why it cannot be read."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(io.BytesIO(compare.read_bytes(path, MAX_SUBMISSION_BYTES) or b"")) as zf:
            names = zf.infolist()
            inside = [i for i in names if i.filename.endswith(".ipynb") and not i.filename.startswith("__MACOSX")]
            if len(inside) != 1:
                raise ValueError(f"the zip holds {len(inside)} notebooks, expected exactly 1")
            if stat.S_ISLNK(inside[0].external_attr >> 16):
                raise ValueError(f"{inside[0].filename} in the zip is a symbolic link (not followed)")
            if inside[0].file_size > MAX_SUBMISSION_BYTES:
                raise ValueError(f"the notebook in the zip is larger than {MAX_SUBMISSION_BYTES // 2**20} MiB")
            return zf.read(inside[0])
    raw = compare.read_bytes(path, MAX_SUBMISSION_BYTES)
    if raw is None:
        raise ValueError("no such file")
    return raw


def read_submission(path: str | Path) -> tuple[dict | None, str]:
    """Load a submitted notebook (``.ipynb``, or a ``.zip`` from ``grader.export()`` holding one).

    Returns ``(notebook as a dict, "")``, or ``(None, error)`` when it cannot be read as a notebook, whatever is
    wrong with the file (a link, a pipe, too large, an encrypted, corrupt or oversized zip, JSON nested too deep).
    """
    try:
        raw = _read_raw(Path(path))
    except Exception as err:  # zipfile alone raises half a dozen kinds
        return None, f"cannot read the file: {bounded(err)}"
    try:
        nb = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not a notebook: the file is not UTF-8 text"
    except json.JSONDecodeError as err:
        return None, f"not a notebook: invalid JSON ({err.msg} at line {err.lineno}, column {err.colno})"
    except (ValueError, RecursionError) as err:  # a 5000-digit number, nesting too deep for the parser
        return None, f"not a notebook: unreadable JSON ({type(err).__name__})"
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list) or nb.get("nbformat") != 4:
        return None, "not a notebook: the JSON has no nbformat 4 'cells' list"
    if not all(isinstance(c, dict) for c in nb["cells"]) or not isinstance(nb.get("metadata", {}), dict):
        return None, "not a notebook: its cells or metadata are not JSON objects"
    return nb, ""


def notebook_exercise(nb: dict) -> str | None:
    """The exercise a notebook was made for (otter's ``assignment_name`` metadata), if any."""
    metadata = nb.get("metadata")
    otter = metadata.get("otter") if isinstance(metadata, dict) else None
    name = otter.get("assignment_name") if isinstance(otter, dict) else None
    return name if isinstance(name, str) and re.fullmatch(r"\w{1,64}", name) else None


def _cell_source(cell: dict) -> str:
    source = cell.get("source", "")
    if isinstance(source, list):
        return "".join(s for s in source if isinstance(s, str))
    return source if isinstance(source, str) else ""


def _is_otter(stmt: ast.stmt) -> bool:
    """Whether ``stmt`` is one of otter's own statements: ``import otter``, ``grader = otter.Notebook(...)``,
    ``grader.check_all()``, ``grader.export(...)``."""
    if isinstance(stmt, ast.Import):
        return [a.name for a in stmt.names] == ["otter"]
    call = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign)) else None
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
        return False
    owner = call.func.value.id if isinstance(call.func.value, ast.Name) else ""
    return (owner, call.func.attr) in {("otter", "Notebook"), ("grader", "check_all"), ("grader", "export")}


def _without_otter(source: str) -> str:
    """``source`` without otter's own statements (whole statements, found by parsing: a comment or a string that
    merely mentions them stays); the source unchanged when it does not parse (its error is the learner's)."""
    try:
        body = ast.parse(source).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return source
    if body and all(_is_otter(stmt) for stmt in body):
        return ""  # otter's cell (its comments go with it)
    lines = source.splitlines(keepends=True)
    for stmt in reversed(body):
        if _is_otter(stmt):
            del lines[stmt.lineno - 1 : stmt.end_lineno]
    return "".join(lines)


def plan(nb: dict) -> list[dict]:
    """The sandbox's steps: the learner's code cells in order, and a checkpoint at each ``grader.check("qN")``.

    otter's own statements (``otter.Notebook``, ``check_all``, ``export``) are left out: grading does not use otter.
    """
    cells = [c for c in nb["cells"] if c.get("cell_type") == "code"]
    sources = [_cell_source(c) for c in cells]
    checks = [m.group(1) if (m := _CHECK.match(s)) else None for s in sources]
    steps = []
    for i, (cell, source) in enumerate(zip(cells, sources, strict=False)):
        if checks[i]:
            steps.append({"checkpoint": checks[i]})
            continue
        kept = _without_otter(source)
        if kept != source and not kept.strip():
            continue
        question = next((q for q in checks[i + 1 :] if q), None)
        tags = cell.get("metadata", {}).get("tags", []) if isinstance(cell.get("metadata"), dict) else []
        first = next((line.strip() for line in kept.splitlines() if line.strip()), "")[:40]
        answer = isinstance(tags, list) and ANSWER_TAG in tags and question
        label = f"{question}'s answer cell" if answer else f"the cell `{bounded(first)}`"
        steps.append({"source": kept, "label": label})
    return steps


@dataclass
class Graded:
    """One submission's grade: per-test results, and what went wrong (empty when nothing did)."""

    results: list[TestResult] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0


class Running:
    """The sandboxes (and checking processes) running now, so that an interrupted batch can kill them at once."""

    def __init__(self):
        self.procs: set[subprocess.Popen] = set()
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def kill_all(self) -> None:
        self.stopped.set()
        with self.lock:
            for proc in list(self.procs):
                proc.kill()

    def start(self, start):
        """``start()`` (a Popen), registered; ``None`` when the batch was interrupted."""
        with self.lock:
            if self.stopped.is_set():
                return None
            proc = start()
            self.procs.add(proc)
            return proc

    def discard(self, proc) -> None:
        with self.lock:
            self.procs.discard(proc)


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


def _why_stopped(returncode: int, notes: list[str], limits: Limits, printed: str, oom: bool) -> str:
    """Why a sandbox that was not killed by the grader ended before its last cell: what the grader observed (the
    memory cgroup's kill, the exit status, the last lines printed), else what the notebook's run reported."""
    if oom:
        return limits.note("memory", together=True)
    if returncode == 128 + signal.SIGXCPU:  # bwrap exits with 128 + the signal that ended its child
        return limits.note("cpu-time")
    kinds = [n.split(":", 1)[1] for n in notes if n.startswith("limit:") and n.split(":", 1)[1] in limits.kinds()]
    if kinds:
        return f"as the notebook's run reported, {limits.note(kinds[-1])}"
    if returncode == 0:
        return "the run ended without its notes (the notebook removed or replaced them in its output folder)"
    return f"the notebook's process died (exit status {returncode}); its last output: {printed or '(nothing)'}"


def _start(work: Path, out, limits: Limits, running: Running | None, cgroup: confine.MemoryCgroup, seed: int):
    """Start the sandbox (registered in ``running``) and hand it ``seed`` on its stdin; ``None`` when the batch was
    interrupted."""
    uid = confine.sandbox_uid()
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
    """Run ``nb`` in a sandbox, then check its outputs here, in a process of their own; never raises for a broken
    notebook.

    The sandbox is killed after ``timeout`` seconds, and runs under ``limits`` (:class:`.limits.Limits`; default
    ``Limits()``); tests of questions answered before a time or resource limit stopped it are still graded.
    Raises :class:`.sandbox.SandboxUnavailable` when bubblewrap cannot run.
    """
    sandbox.require_bwrap()
    limits = limits or Limits()
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="course-embed-grade-"))
    cgroup = confine.MemoryCgroup(limits.memory, work.name)
    seed = secrets.randbits(62)  # the hidden tests' inputs, new for every grading run
    try:
        sandbox.prepare(work, suite.sources, json.dumps({"steps": plan(nb), "limits": limits.rlimits()}))
        log = work / "sandbox.log"
        with open(log, "wb") as out:
            proc = _start(work, out, limits, running, cgroup, seed)
            if proc is None:
                return Graded(error="interrupted")
            try:
                stopped = _wait(proc, work, timeout, limits)
            finally:
                if running is not None:
                    running.discard(proc)
        notes = _notes(work / "out")
        if not stopped and notes[-1:] != ["finished"]:
            stopped = _why_stopped(proc.returncode, notes, limits, _log_tail(log), cgroup.oom_killed())
        results = compare.score_apart(suite, work / "out", stopped, running, seed=seed)
        if not stopped and cgroup.oom_killed():  # one of its processes was killed, the run went on
            stopped = limits.note("memory", together=True)
        errors = [bounded(stopped, 800)] if stopped else []
        reported = [n for n in notes[:MAX_NOTES] if n != "finished" and not n.startswith("limit:")]
        if len(notes) > MAX_NOTES:
            reported.append(f"(more than {MAX_NOTES} notes; the rest left out)")
        if reported:
            errors.append("the notebook's run reported: " + "; ".join(reported))
        return Graded(results, "; ".join(errors), time.monotonic() - start)
    finally:
        cgroup.remove()
        shutil.rmtree(work, ignore_errors=True)
