"""The trusted side of a test: the exercise's test files, the part of them that may enter the sandbox, and scoring.

Each exercise has two test files (see :mod:`.probe` for their format):

* ``exercises/checks/NN_topic.py``: the public tests, which learners run with ``grader.check``;
* ``exercises/source/NN_topic_hidden.py``: the hidden tests, the instructor's only (not in a release).

Only the *gathering* half of every test enters the sandbox: :func:`strip_checks` cuts each test function at its
``yield`` (what follows, the comparisons and the expected values, stays outside). :func:`score` reads back what the
sandbox gathered, as data only (``torch.load(weights_only=True)``, size-capped), and runs the checking halves here.
"""

from __future__ import annotations

import ast
import io
import json
import re
import signal
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import probe
from .notebook import parse, read_bytes

MAX_OUTPUT_BYTES = 64 * 2**20  # per test: far above any honest answer's outputs


@dataclass(frozen=True)
class Question:
    """A graded question: its name, its points, and the names its tests read from the notebook."""

    name: str
    points: float
    answers: tuple[str, ...]


@dataclass
class TestResult:
    """One test's result, as a Gradescope ``results.json`` entry wants it (``passed``: whether its check passed,
    which a public test worth no points when graded says only here)."""

    name: str
    question: str
    score: float
    max_score: float
    output: str
    hidden: bool
    passed: bool | None = None

    @property
    def ok(self) -> bool:
        return self.passed if self.passed is not None else self.score == self.max_score

    def as_gradescope(self) -> dict:
        return {
            "name": f"{self.question} {self.name}",
            "score": self.score,
            "max_score": self.max_score,
            "output": self.output or "passed",
            "visibility": "after_published" if self.hidden else "visible",
        }


@dataclass
class Suite:
    """An exercise's tests: public and hidden, with the source of the files they came from."""

    exercise: str
    tests: list[probe.TestSpec]
    sources: dict[str, str] = field(default_factory=dict)
    root: Path | None = None  # the exercises folder it was loaded from

    @property
    def graded_points(self) -> dict[str, float]:
        """What each test earns when an instructor grades: a question's points (the sum its tests are written
        with, as the notebook states them) go to the tests whose inputs the submission cannot know in advance, the
        hidden tests and any public test that draws its inputs from the grading seed, in proportion to their
        written points. A public test on fixed inputs earns nothing: learners hold its expected values
        (``checks/``), so replaying them would earn points without an implementation; it is feedback. A question
        with no such test keeps its written points (:func:`load_suite` refuses it for grading)."""
        points: dict[str, float] = {}
        for q in {t.question for t in self.tests}:
            mine = [t for t in self.tests if t.question == q]
            earning = [t for t in mine if t.hidden or t.seeded]
            written, earned = sum(t.points for t in mine), sum(t.points for t in earning)
            for t in mine:
                if not earned:
                    points[t.name] = t.points
                else:
                    points[t.name] = t.points * written / earned if t in earning else 0.0
        return points

    @property
    def questions(self) -> list[Question]:
        found: dict[str, Question] = {}
        for spec in self.tests:
            q = found.get(spec.question, Question(spec.question, 0.0, ()))
            answers = tuple(dict.fromkeys(q.answers + spec.answers))
            found[spec.question] = Question(q.name, q.points + spec.points, answers)
        return sorted(found.values(), key=lambda q: _natural(q.name))


def _natural(name: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def test_files(root: Path, exercise: str) -> dict[str, Path]:
    """The exercise's test files that exist: ``public`` (``checks/``) and ``hidden`` (``source/``)."""
    files = {"public": root / "checks" / f"{exercise}.py", "hidden": root / "source" / f"{exercise}_hidden.py"}
    return {kind: path for kind, path in files.items() if path.is_file()}


def load_suite(root: str | Path, exercise: str, *, require_hidden: bool = True) -> Suite:
    """Load an exercise's tests; ``ValueError`` naming the missing file (an instructor grades with both)."""
    root = Path(root)
    files = test_files(root, exercise)
    if "public" not in files or (require_hidden and "hidden" not in files):
        missing = "checks" if "public" not in files else "source"
        raise ValueError(
            f"{root / missing}: no tests for {exercise} "
            f"({'public checks/' if missing == 'checks' else 'hidden source/'}{exercise}"
            f"{'' if missing == 'checks' else '_hidden'}.py); grade from the instructor's copy of "
            f"the exercises (--root)"
        )
    tests, sources = [], {}
    for kind, path in files.items():
        module = probe.load_module(path, f"_{kind}_{exercise}")
        found = probe.tests_of(module)
        for spec in found:
            if spec.hidden != (kind == "hidden"):
                raise ValueError(f"{path}: test {spec.name} is marked hidden={spec.hidden} in the {kind} file")
        tests += found
        sources[kind] = strip_checks(path.read_text(encoding="utf-8"), str(path))
    names = [t.name for t in tests]
    if len(set(names)) != len(names):
        raise ValueError(f"{exercise}: two tests share a name: {sorted(n for n in names if names.count(n) > 1)}")
    if require_hidden:
        for q in sorted({t.question for t in tests}):
            if not any(t.hidden or t.seeded for t in tests if t.question == q):
                raise ValueError(
                    f"{exercise} {q}: no hidden test and no public test drawing its inputs from the seed, so its "
                    f"points could only be earned by replaying the public checks' expected values; add a hidden test"
                )
    return Suite(exercise, tests, sources, root)


def strip_checks(source: str, filename: str = "<tests>") -> str:
    """The test file with every test cut at its ``yield``: ``got = yield X`` becomes ``return X``.

    Raises ``ValueError`` for a test whose ``yield`` is not a statement of the function's own body, and for a
    file that imports course_embed outside the test runtime (the sandbox has no such module).
    """
    tree = parse(source, filename)  # one thread at a time: CPython's parser is not thread-safe
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and node in tree.body:
            mod = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            if (mod or "").startswith("course_embed") and mod != "course_embed.tools.grading.probe":
                raise ValueError(
                    f"{filename}:{node.lineno}: import {mod} inside the test functions, after the "
                    f"yield (the sandbox has no course_embed)"
                )
    for func in [n for n in tree.body if isinstance(n, ast.FunctionDef) and _is_test(n)]:
        for index, stmt in enumerate(func.body):
            value = None
            if (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Yield)
                or isinstance(stmt, ast.Assign)
                and isinstance(stmt.value, ast.Yield)
            ):
                value = stmt.value.value
            if value is not None:
                func.body = func.body[:index] + [ast.Return(value=value, lineno=stmt.lineno, col_offset=0)]
                break
        else:
            if any(isinstance(n, ast.Yield) for n in ast.walk(func)):
                raise ValueError(f"{filename}: test {func.name}: put its one yield at the top level of its body")
    return ast.unparse(tree) + "\n"


def _is_test(func: ast.FunctionDef) -> bool:
    """Whether ``func`` is decorated with ``@test(...)``."""
    return any(isinstance(d, ast.Call) and getattr(d.func, "id", None) == "test" for d in func.decorator_list)


def _uncompressed(data: bytes) -> None:
    """``ValueError`` unless ``data`` is a ``torch.save`` archive whose records are stored uncompressed (as torch
    writes them) and add up to at most :data:`MAX_OUTPUT_BYTES`: torch inflates compressed records on load."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = archive.infolist()
    if len(members) > 10_000 or any(m.compress_type != zipfile.ZIP_STORED for m in members):
        raise ValueError("compressed records")
    if sum(m.file_size for m in members) > MAX_OUTPUT_BYTES:
        raise ValueError(f"larger than {MAX_OUTPUT_BYTES // 2**20} MiB uncompressed")


@dataclass(frozen=True)
class Unreadable:
    """The grader's own verdict on an output file it would not load (a type ``torch.load`` never returns, so the
    sandbox cannot forge it): ``why`` is the grader's text, shown as it is."""

    why: str


def read_output(path: Path) -> object:
    """What the sandbox wrote for one test, loaded as data only; :class:`Unreadable` when unusable."""
    try:
        data = read_bytes(path, MAX_OUTPUT_BYTES)
        if data is None:
            return None
        _uncompressed(data)
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except ValueError as err:  # read_bytes and _uncompressed: the grader's own fixed sentences
        return Unreadable(f"the outputs of this test could not be read: {err}")
    except Exception as err:  # a corrupt or forged file is the submission's problem, never the grader's
        return Unreadable(f"unreadable outputs ({type(err).__name__})")


def score(suite: Suite, out: Path, stopped: str = "", seed: int | None = None) -> list[TestResult]:
    """Check every test of ``suite`` against the outputs in ``out``, here; ``stopped`` explains missing outputs,
    ``seed`` is the secret the sandbox's gathering was given (hidden tests draw their inputs from it). Each test
    earns its :attr:`Suite.graded_points`.

    A batch calls :func:`score_apart` instead, which runs this in a process of its own under time and memory limits.
    """
    points = suite.graded_points
    return [_score_one(spec, out, stopped, seed, points[spec.name]) for spec in suite.tests]


def _score_one(spec: probe.TestSpec, out: Path, stopped: str, seed: int | None, points: float) -> TestResult:
    gathered = read_output(out / f"{spec.name}.pt")
    if gathered is None:
        passed, message = False, f"not graded: {stopped or 'the notebook stopped before this question'}"
    elif isinstance(gathered, Unreadable):
        passed, message = False, f"not graded: {gathered.why}"
    else:
        passed, message = probe.check(spec, gathered, seed)
    return TestResult(spec.name, spec.question, points if passed else 0.0, points, message, spec.hidden, passed)


#: What the checks of one submission may use in their own process: CPU seconds (the limit that counts, so a busy
#: machine costs no point), wall-clock seconds (a backstop only, far above it), bytes of address space (the checks
#: build float64 references of the tests' small inputs: far below these).
CHECK_SECONDS, CHECK_WALL, CHECK_MEMORY = 120, 1800, 4 * 2**30


def score_apart(
    suite: Suite,
    out: Path,
    stopped: str = "",
    running=None,
    seconds: float = CHECK_SECONDS,
    seed: int | None = None,
    wall: float = CHECK_WALL,
) -> tuple[list[TestResult], str]:
    """:func:`score` in a child process with its own limits, so that outputs that make a check slow, huge or crash
    cost their own row only, and no other submission waits for them: ``seconds`` of CPU time (what counts: a
    machine busy with other work slows the checks without costing a point), :data:`CHECK_MEMORY` of memory, and
    ``wall`` seconds of wall-clock time as a backstop.

    Returns the results and, when the child did not finish every test, why (for the gradebook's ``error``; each
    test it did not finish gets a result saying so too). ``running`` (a :class:`.submission.Running`) holds the
    child while it runs, so that Ctrl-C kills it. The secret ``seed`` reaches the child on its standard input, not
    on its command line.
    """
    if suite.root is None:
        raise ValueError("score_apart needs a suite loaded with load_suite (it reloads it from suite.root)")
    where = str(Path(__file__).resolve().parents[3])  # the folder holding course_embed
    argv = [sys.executable, "-I", "-c", _CHILD, where, str(suite.root), suite.exercise, str(out), stopped,
            str(int(seconds)), str(CHECK_MEMORY)]  # fmt: skip

    def start():
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.PIPE)

    proc = start() if running is None else running.start(start)
    printed, why = b"", "interrupted"
    if proc is not None:
        try:
            printed, _ = proc.communicate(input=b"" if seed is None else f"{seed}\n".encode(), timeout=wall)
            why = f"the checks of these outputs crashed (exit status {proc.returncode})"
            if proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
                why = f"the checks of these outputs took longer than {seconds:g} s of CPU time"
        except subprocess.TimeoutExpired:
            proc.kill()
            printed, _ = proc.communicate()
            why = f"the checks of these outputs took longer than {wall:g} s of wall-clock time"
        finally:
            if running is not None:
                running.discard(proc)
    done = {}
    for line in printed.decode("utf-8", "replace").splitlines():
        try:
            entry = json.loads(line)
            done[entry["name"]] = TestResult(**entry)
        except (ValueError, TypeError, KeyError):
            continue
    points = suite.graded_points
    results = [
        done.get(t.name) or TestResult(t.name, t.question, 0.0, points[t.name], why, t.hidden, False)
        for t in suite.tests
    ]
    return results, "" if len(done) == len(suite.tests) else why


_CHILD = """
import json, resource, sys
where, root, exercise, out, stopped, seconds, memory = sys.argv[1:]
line = sys.stdin.readline().strip()
seed = int(line) if line else None
resource.setrlimit(resource.RLIMIT_CPU, (int(seconds), int(seconds) + 5))
resource.setrlimit(resource.RLIMIT_AS, (int(memory), int(memory)))
sys.path.insert(0, where)
from dataclasses import asdict
from pathlib import Path
from course_embed.tools.grading import compare
suite = compare.load_suite(root, exercise)
points = suite.graded_points
for spec in suite.tests:
    print(json.dumps(asdict(compare._score_one(spec, Path(out), stopped, seed, points[spec.name]))), flush=True)
"""
