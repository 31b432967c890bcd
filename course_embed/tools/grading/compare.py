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
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import probe

MAX_OUTPUT_BYTES = 64 * 2**20  # per test: far above any honest answer's outputs


@dataclass(frozen=True)
class Question:
    """A graded question: its name, its points, and the names its tests read from the notebook."""

    name: str
    points: float
    answers: tuple[str, ...]


@dataclass
class TestResult:
    """One test's result, as a Gradescope ``results.json`` entry wants it."""

    name: str
    question: str
    score: float
    max_score: float
    output: str
    hidden: bool

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
    return Suite(exercise, tests, sources)


def strip_checks(source: str, filename: str = "<tests>") -> str:
    """The test file with every test cut at its ``yield``: ``got = yield X`` becomes ``return X``.

    Raises ``ValueError`` for a test whose ``yield`` is not a statement of the function's own body, and for a
    file that imports course_embed outside the test runtime (the sandbox has no such module).
    """
    tree = ast.parse(source, filename)
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


def read_output(path: Path) -> object:
    """What the sandbox wrote for one test, loaded as data only; ``{"__gather_failed__": why}`` when unusable."""
    try:
        if path.stat().st_size > MAX_OUTPUT_BYTES:
            return {"__gather_failed__": f"the outputs are larger than {MAX_OUTPUT_BYTES // 2**20} MiB"}
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        return None
    except Exception as err:  # a corrupt or forged file is the submission's problem, never the grader's
        return {"__gather_failed__": f"unreadable outputs ({type(err).__name__})"}


def score(suite: Suite, out: Path, stopped: str = "", seed: int | None = None) -> list[TestResult]:
    """Check every test of ``suite`` against the outputs in ``out``; ``stopped`` explains missing outputs, ``seed``
    is the secret the sandbox's gathering was given (hidden tests draw their inputs from it)."""
    results = []
    for spec in suite.tests:
        gathered = read_output(out / f"{spec.name}.pt")
        if gathered is None:
            passed, message = False, f"not graded: {stopped or 'the notebook stopped before this question'}"
        else:
            passed, message = probe.check(spec, gathered, seed)
        results.append(
            TestResult(spec.name, spec.question, spec.points if passed else 0.0, spec.points, message, spec.hidden)
        )
    return results
