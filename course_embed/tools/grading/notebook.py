"""A submitted notebook, read apart: its bytes, its exercise and the sandbox's plan, built in a limited child.

A submission is untrusted data: a 5 KB zip can hold a notebook whose JSON or cells take gigabytes to parse, and a
notebook can have a million cells. So the grader never parses one in its own process: :func:`read_apart` runs
this file as a child process under memory and CPU-time limits (killed on Ctrl-C with the rest of the batch), which
reads the file (:func:`read_submission`), names its exercise (:func:`notebook_exercise`) and, when asked, writes the
sandbox's plan (:func:`plan`, linear in the number of cells). The grader reads back one short JSON line.

This module imports only the standard library and :mod:`.text`, so the child starts in a few tens of milliseconds.
CPython's parser is not safe to enter from two threads at once (3.11 raises ``SystemError: AST constructor
recursion depth mismatch``): every ``ast.parse`` of the grading code goes through :func:`parse`, which holds
:data:`PARSER`.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import stat
import subprocess
import sys
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .text import bounded

ANSWER_TAG = "otter_answer_cell"  # otter assign tags every cell where the learner writes an answer
_CHECK = re.compile(r"""^\s*grader\.check\(\s*["'](\w+)["']\s*\)\s*$""")

#: The largest submission read (a notebook, or the notebook inside a zip, uncompressed): far above any notebook's.
MAX_SUBMISSION_BYTES = 50 * 2**20
#: What the child that reads one submission may use: bytes of address space, CPU seconds, wall-clock seconds.
READ_MEMORY, READ_CPU, READ_WALL = 2 * 2**30, 60, 600

#: Held around every ``ast.parse`` of the grading code (see the module's docstring).
PARSER = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, one thread at a time."""
    with PARSER:
        return ast.parse(source, filename)


def read_bytes(path: Path, limit: int) -> bytes | None:
    """The bytes of the regular file ``path``, read without following a symbolic link and without blocking on a
    named pipe or device; ``None`` when it does not exist. ``ValueError`` when it is not a regular file or is
    larger than ``limit`` bytes (the sandbox may have put anything at that name)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise ValueError("not a regular file (a link?)") from err
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > limit:
            raise ValueError(f"larger than {limit // 2**20} MiB")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit // 2**20} MiB")
    return data


def _read_raw(path: Path) -> bytes:
    """The submission's notebook bytes, size-capped; ``ValueError`` saying why it cannot be read."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(io.BytesIO(read_bytes(path, MAX_SUBMISSION_BYTES) or b"")) as zf:
            names = zf.infolist()
            inside = [i for i in names if i.filename.endswith(".ipynb") and not i.filename.startswith("__MACOSX")]
            if len(inside) != 1:
                raise ValueError(f"the zip holds {len(inside)} notebooks, expected exactly 1")
            if stat.S_ISLNK(inside[0].external_attr >> 16):
                raise ValueError(f"{inside[0].filename} in the zip is a symbolic link (not followed)")
            if inside[0].file_size > MAX_SUBMISSION_BYTES:
                raise ValueError(f"the notebook in the zip is larger than {MAX_SUBMISSION_BYTES // 2**20} MiB")
            return zf.read(inside[0])
    raw = read_bytes(path, MAX_SUBMISSION_BYTES)
    if raw is None:
        raise ValueError("no such file")
    return raw


def read_submission(path: str | Path) -> tuple[dict | None, str]:
    """Load a submitted notebook (``.ipynb``, or a ``.zip`` from ``grader.export()`` holding one).

    Returns ``(notebook as a dict, "")``, or ``(None, error)`` when it cannot be read as a notebook, whatever is
    wrong with the file (a link, a pipe, too large, an encrypted, corrupt or oversized zip, JSON nested too deep).
    The grader calls it only in the child of :func:`read_apart`.
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
    if "otter" not in source and "grader" not in source:
        return source  # nothing of otter's: no need to parse
    try:
        body = parse(source).body
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
    Linear in the number of cells: the question a cell answers (the next check after it) comes from one pass from
    the end.
    """
    cells = [c for c in nb["cells"] if c.get("cell_type") == "code"]
    sources = [_cell_source(c) for c in cells]
    checks = [m.group(1) if (m := _CHECK.match(s)) else None for s in sources]
    following: list[str | None] = [None] * len(cells)  # the check after each cell
    upcoming = None
    for i in range(len(cells) - 1, -1, -1):
        following[i] = upcoming
        upcoming = checks[i] or upcoming
    steps = []
    for cell, source, check, question in zip(cells, sources, checks, following, strict=True):
        if check:
            steps.append({"checkpoint": check})
            continue
        kept = _without_otter(source)
        if kept != source and not kept.strip():
            continue
        tags = cell.get("metadata", {}).get("tags", []) if isinstance(cell.get("metadata"), dict) else []
        first = next((line.strip() for line in kept[:4000].splitlines() if line.strip()), "")[:40]
        answer = isinstance(tags, list) and ANSWER_TAG in tags and question
        label = f"{question}'s answer cell" if answer else f"the cell `{bounded(first)}`"
        steps.append({"source": kept, "label": label})
    return steps


class Running:
    """The children a batch runs now (readers of submissions, sandboxes, checks), so that an interrupted batch can kill
    them at once; after :meth:`kill_all` no new one starts."""

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


@dataclass(frozen=True)
class Reading:
    """What the child found in one submission: its exercise (``None`` if it names none) and, when it cannot be
    read as a notebook or the child stopped, ``error``."""

    exercise: str | None
    error: str = ""


def read_apart(path: Path, plan_to: Path | None = None, limits: dict | None = None, running=None) -> Reading:
    """Read the submission ``path`` in a child process under :data:`READ_MEMORY`, :data:`READ_CPU` and
    :data:`READ_WALL`; with ``plan_to``, the child also writes the sandbox's plan there
    (``{"steps": plan(nb), "limits": limits}``). ``running`` (a :class:`Running`) holds the child, so
    that Ctrl-C kills it."""
    package = Path(__file__).resolve().parent
    argv = [sys.executable, "-I", "-c", _CHILD, str(package), os.fsdecode(path), str(plan_to or ""),
            json.dumps(limits or {}), str(READ_MEMORY), str(READ_CPU)]  # fmt: skip

    def start():
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)

    proc = start() if running is None else running.start(start)
    if proc is None:
        return Reading(None, "interrupted")
    try:
        printed, _ = proc.communicate(timeout=READ_WALL)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return Reading(None, f"cannot read the file: reading it took longer than {READ_WALL} s")
    finally:
        if running is not None:
            running.discard(proc)
    try:
        found = json.loads(printed[:4096].decode("utf-8"))
        return Reading(found["exercise"], bounded(found["error"], 300))
    except (ValueError, KeyError, TypeError):
        if running is not None and running.stopped.is_set():
            return Reading(None, "interrupted")
        return Reading(
            None,
            f"cannot read the file: reading it needs more than {READ_MEMORY // 2**30} GiB of memory or "
            f"{READ_CPU} s of CPU time (exit status {proc.returncode})",
        )


def _child(path: str, plan_to: str, limits: str) -> dict:
    """The child of :func:`read_apart`: read, name the exercise, write the plan."""
    nb, error = read_submission(path)
    if nb is None:
        return {"exercise": None, "error": error}
    if plan_to:
        with open(plan_to, "x") as f:
            json.dump({"steps": plan(nb), "limits": json.loads(limits)}, f)
    return {"exercise": notebook_exercise(nb), "error": ""}


_CHILD = """
import json, resource, sys, types
package, path, plan_to, limits, memory, cpu = sys.argv[1:]
resource.setrlimit(resource.RLIMIT_AS, (int(memory), int(memory)))
resource.setrlimit(resource.RLIMIT_CPU, (int(cpu), int(cpu) + 5))
sys.modules["_grading"] = types.ModuleType("_grading")
sys.modules["_grading"].__path__ = [package]  # this folder as a package, without course_embed's imports (torch)
from _grading import notebook
print(json.dumps(notebook._child(path, plan_to, limits)), flush=True)
"""
