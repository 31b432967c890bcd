"""One submission: reading it, planning what the sandbox runs, and grading it (sandbox inside, checks outside)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from . import sandbox
from .compare import Suite, TestResult, score
from .limits import Limits

ANSWER_TAG = "otter_answer_cell"  # otter assign tags every cell where the learner writes an answer
_CHECK = re.compile(r"""^\s*grader\.check\(\s*["'](\w+)["']\s*\)\s*$""")


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_submission(path: str | Path) -> tuple[dict | None, str]:
    """Load a submitted notebook (``.ipynb``, or a ``.zip`` from ``grader.export()`` holding one).

    Returns ``(notebook as a dict, "")``, or ``(None, error)`` when it cannot be read as a notebook.
    """
    path = Path(path)
    try:
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as zf:
                inside = [n for n in zf.namelist() if n.endswith(".ipynb") and not n.startswith("__MACOSX")]
                if len(inside) != 1:
                    return None, f"the zip holds {len(inside)} notebooks, expected exactly 1"
                raw = zf.read(inside[0])
        else:
            raw = path.read_bytes()
    except (OSError, zipfile.BadZipFile) as err:
        return None, f"cannot read the file: {_short(err)}"
    try:
        nb = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not a notebook: the file is not UTF-8 text"
    except json.JSONDecodeError as err:
        return None, f"not a notebook: invalid JSON ({err.msg} at line {err.lineno}, column {err.colno})"
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list) or nb.get("nbformat") != 4:
        return None, "not a notebook: the JSON has no nbformat 4 'cells' list"
    return nb, ""


def notebook_exercise(nb: dict) -> str | None:
    """The exercise a notebook was made for (otter's ``assignment_name`` metadata), if any."""
    name = nb.get("metadata", {}).get("otter", {}).get("assignment_name")
    return name if isinstance(name, str) else None


def plan(nb: dict) -> list[dict]:
    """The sandbox's steps: the learner's code cells in order, and a checkpoint at each ``grader.check("qN")``.

    otter's own cells (``otter.Notebook``, ``check_all``, ``export``) are left out: grading does not use otter.
    """
    cells = [c for c in nb["cells"] if c.get("cell_type") == "code"]
    sources = ["".join(c.get("source", "")) for c in cells]
    checks = [m.group(1) if (m := _CHECK.match(s)) else None for s in sources]
    steps = []
    for i, (cell, source) in enumerate(zip(cells, sources, strict=False)):
        if checks[i]:
            steps.append({"checkpoint": checks[i]})
            continue
        if "otter.Notebook(" in source or "grader.check_all(" in source or "grader.export(" in source:
            continue
        question = next((q for q in checks[i + 1 :] if q), None)
        tags = cell.get("metadata", {}).get("tags", [])
        first = next((line.strip() for line in source.splitlines() if line.strip()), "")[:40]
        label = f"{question}'s answer cell" if ANSWER_TAG in tags and question else f"the cell `{first}`"
        steps.append({"source": source, "label": label})
    return steps


@dataclass
class Graded:
    """One submission's grade: per-test results, and what went wrong (empty when nothing did)."""

    results: list[TestResult] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0


class Running:
    """The sandboxes running now, so that an interrupted batch can kill them at once."""

    def __init__(self):
        self.procs: set[subprocess.Popen] = set()
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def kill_all(self) -> None:
        self.stopped.set()
        with self.lock:
            for proc in list(self.procs):
                proc.kill()


def _start(work: Path, out, running: Running | None, limits: Limits) -> subprocess.Popen | None:
    """Start the sandbox, registered in ``running``; ``None`` when the batch was interrupted."""
    command = sandbox.python(work, "runner.py", limits)
    if running is None:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    with running.lock:
        if running.stopped.is_set():
            return None
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        running.procs.add(proc)
        return proc


def _disk_use(folder: Path) -> int:
    """Bytes of the files under ``folder`` (what they occupy on disk)."""
    total = 0
    for parent, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_blocks * 512
            except OSError:
                continue
    return total


def _wait(proc: subprocess.Popen, work: Path, timeout: float, limits: Limits) -> str:
    """Wait for the sandbox; kill it at the time limit, or when its files on the host (``work``: the outputs and
    what it prints) outgrow the disk limit. Returns why it was stopped (empty if it ended by itself)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            proc.wait(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
            return ""
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                stopped = f"timed out after {timeout:g} s (an infinite loop or a very slow cell?)"
            elif _disk_use(work) > limits.disk:
                stopped = limits.note("disk")
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


def _why_stopped(returncode: int, notes: list[str], limits: Limits, printed: str = "") -> str:
    """Why a sandbox that was not killed by the grader ended before its last cell (``printed``: its last lines)."""
    kinds = [n.split(":", 1)[1] for n in notes if n.startswith("limit:")]
    if kinds:
        return limits.note(kinds[-1])
    if returncode == 128 + signal.SIGXCPU:  # bwrap exits with 128 + the signal that ended its child
        return limits.note("cpu-time")
    return f"the notebook's process died (exit status {returncode}); its last output: {printed or '(nothing)'}"


def grade_notebook(
    nb: dict, suite: Suite, timeout: float = 300.0, running: Running | None = None, limits: Limits | None = None
) -> Graded:
    """Run ``nb`` in a sandbox, then check its outputs here; never raises for a broken notebook.

    The sandbox is killed after ``timeout`` seconds, and runs under ``limits`` (:class:`.limits.Limits`; default
    ``Limits()``); tests of questions answered before a time or resource limit stopped it are still graded.
    Raises :class:`.sandbox.SandboxUnavailable` when bubblewrap cannot run.
    """
    sandbox.require_bwrap()
    limits = limits or Limits()
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="course-embed-grade-"))
    try:
        sandbox.prepare(work, suite.sources, json.dumps({"steps": plan(nb), "limits": limits.rlimits()}))
        log = work / "sandbox.log"
        with open(log, "wb") as out:
            proc = _start(work, out, running, limits)
            if proc is None:
                return Graded(error="interrupted")
            try:
                stopped = _wait(proc, work, timeout, limits)
            finally:
                if running is not None:
                    with running.lock:
                        running.procs.discard(proc)
        try:
            notes = json.loads((work / "out" / "cells.json").read_text())
            notes = [str(n) for n in notes] if isinstance(notes, list) else []
        except (OSError, ValueError):
            notes = []
        finished = notes[-1:] == ["finished"]
        if not stopped and not finished:
            stopped = _why_stopped(proc.returncode, notes, limits, _log_tail(log))
        results = score(suite, work / "out", stopped)
        errors = [_short(stopped, 800)] if stopped else []
        errors += [_short(n, 200) for n in notes if n != "finished" and not n.startswith("limit:")]
        return Graded(results, "; ".join(errors), time.monotonic() - start)
    finally:
        shutil.rmtree(work, ignore_errors=True)
