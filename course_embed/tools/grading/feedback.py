"""Feedback a learner keeps: per submission, Gradescope's ``results.json`` and a plain-text ``feedback.txt``.

``results.json`` follows Gradescope's autograder specification: ``score``, ``execution_time`` and ``tests``, each
test with ``name``, ``score``, ``max_score``, ``output`` and ``visibility`` (``visible`` for public tests,
``after_published`` for hidden ones, so an instructor publishing grades decides when learners see them), and
``"output_format": "text"`` at the top and for every test, so that a viewer shows the learner's text as text.
"""

from __future__ import annotations

import json
from pathlib import Path

from .assign import atomic_write
from .compare import Question, TestResult
from .text import CONTROL


def _plain(text: str, limit: int = 2000) -> str:
    """Text for a learner's feedback: no control characters (terminal escapes, bidirectional overrides), bounded."""
    text = CONTROL.sub(" ", str(text))
    return text if len(text) <= limit else text[: limit - 6] + " [...]"


def results_json(results: list[TestResult], error: str, seconds: float) -> dict:
    """The Gradescope ``results.json`` content for one submission."""
    data = {
        "score": round(sum(r.score for r in results), 6),
        "execution_time": round(seconds, 1),
        "output_format": "text",  # the learner's text is shown as text, never as Markdown or HTML
        "tests": [
            {**r.as_gradescope(), "output": _plain(r.output or "passed"), "output_format": "text"} for r in results
        ],
    }
    if error:
        data["output"] = _plain(f"While grading: {error}")
    return data


def feedback_text(student: str, exercise: str, questions: list[Question], results: list[TestResult], error: str) -> str:
    """A readable report: per question its score, then each test that failed, and why for a public one (a hidden
    test's message names its inputs and expected values, which results.json shows only once grades are published)."""
    total, possible = sum(r.score for r in results), sum(q.points for q in questions)
    lines = [f"{exercise}: {student}", f"score: {total:.6g} / {possible:g}", ""]
    if error:
        lines += [_plain(f"while grading: {error}"), ""]
    if any(not r.hidden and not r.max_score for r in results):
        lines += ["(the public tests, which you ran with grader.check, are feedback: the points are the hidden tests')",
                  ""]  # fmt: skip
    for q in questions:
        mine = [r for r in results if r.question == q.name]
        lines.append(f"{q.name}: {sum(r.score for r in mine):.6g} / {q.points:g}")
        for r in mine:
            if r.ok:
                mark = "passed"
            elif r.hidden:  # its inputs and expected values stay hidden, as results.json keeps them until published
                mark = "failed"
            else:
                mark = f"failed: {_plain(r.output)}"
            worth = f"{r.max_score:.3g}" if r.max_score or r.hidden else "no points"
            lines.append(f"  [{'hidden' if r.hidden else 'public'}] {r.name} ({worth}): {mark}")
    return "\n".join(lines) + "\n"


def write_feedback(
    folder: Path,
    student: str,
    exercise: str,
    questions: list[Question],
    results: list[TestResult],
    error: str,
    seconds: float,
) -> None:
    """Write ``results.json`` and ``feedback.txt`` into ``folder`` (created)."""
    atomic_write(folder / "results.json", (json.dumps(results_json(results, error, seconds), indent=1) + "\n").encode())
    atomic_write(folder / "feedback.txt", feedback_text(student, exercise, questions, results, error).encode())
