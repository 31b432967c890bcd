"""Grading a batch: one row per (student, exercise), every submission in its own sandbox, two at a time, the
gradebook saved after each one."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from .assign import EXERCISES
from .compare import Suite, load_suite
from .feedback import write_feedback
from .gradebook import Found, Gradebook, GradeRow, Submission, find_submissions, now, safe_name, shown, submitted_at
from .limits import Limits
from .sandbox import require_bwrap
from .submission import Running, grade_file


class Interrupted(Exception):
    """Ctrl-C during a batch: the finished rows were kept (``book``), the running sandboxes killed."""

    def __init__(self, book: Gradebook, total: int):
        super().__init__(f"interrupted: {len(book.rows)} of {total} submissions graded and kept")
        self.book, self.total = book, total


def grade_submission(
    submission: Submission,
    suite: Suite,
    feedback: Path | None,
    timeout: float = 300.0,
    running: Running | None = None,
    limits: Limits | None = None,
) -> GradeRow:
    """Grade one file; never raises for a broken submission (its row says what went wrong)."""
    path, student = submission.path, submission.student
    row = GradeRow(
        student, shown(path), suite.exercise, {q.name: 0.0 for q in suite.questions}, submitted=submitted_at(path)
    )
    graded = grade_file(path, suite, timeout, running, limits)
    row.error = graded.error
    for r in graded.results:
        row.scores[r.question] += r.score
    row.scores = {q: round(points, 6) for q, points in row.scores.items()}  # hidden tests' shares add up exactly
    row.graded_at = now()
    if running is not None and running.stopped.is_set():
        return row  # interrupted: this row is not kept, so no feedback either
    if feedback is not None:
        folder = feedback / safe_name(student) / suite.exercise
        write_feedback(folder, student, suite.exercise, suite.questions, graded.results, row.error, graded.seconds)
    return row


def _ungraded(submission: Submission, error: str) -> GradeRow:
    """The row of a submission that cannot be graded (unreadable, no exercise, no tests for its exercise)."""
    return GradeRow(
        submission.student,
        shown(submission.path),
        submission.exercise or "",
        error=error,
        submitted=submitted_at(submission.path),
        graded_at=now(),
    )


def load_suites(root: str | Path, submissions: list[Submission]) -> tuple[dict[str, Suite], dict[str, str]]:
    """The tests of every exercise the submissions were made for, and why an exercise has none (its rows' error).
    ``ValueError`` when no exercise has tests: the root is wrong, not the submissions."""
    suites, missing = {}, {}
    for exercise in sorted({s.exercise for s in submissions if s.exercise}):
        try:
            suites[exercise] = load_suite(root, exercise)
        except ValueError as err:
            missing[exercise] = str(err)
    if missing and not suites:
        raise ValueError("; ".join(missing.values()))
    return suites, missing


def grade_batch(
    submissions: list[str | Path] | Found,
    out: str | Path,
    *,
    exercise: str | None = None,
    layout: str = "auto",
    root: str | Path = EXERCISES,
    jobs: int = 2,
    timeout: float = 300.0,
    limits: Limits | None = None,
    feedback: str | Path | None = None,
    on_result: Callable[[GradeRow], None] | None = None,
) -> Gradebook:
    """Grade many submissions and write the gradebook CSV ``out``: one row per (student, exercise).

    Args:
        submissions: notebooks, exported zips, or folders of them (see :func:`.gradebook.find_submissions` for
            students, ``layout`` and resubmissions), or what that function found.
        out: the CSV, rewritten atomically after every graded submission; written (header only) for an empty batch.
        exercise: ``NN_topic`` to grade that exercise only (files for others are skipped and listed); default:
            each submission for the exercise it was made for.
        layout: who handed in a file in the folders given (``auto``, ``students``, ``student``).
        root: the instructor's exercises folder (``checks/`` and ``source/`` with the hidden tests).
        jobs: sandboxes running at the same time.
        timeout: seconds one submission may run before its sandbox is killed (answered questions still count).
        limits: memory, file size, disk, processes and CPU time of each sandbox (:class:`.limits.Limits`;
            default ``Limits()``); a submission stopped at one is graded like one stopped by ``timeout``.
        feedback: folder for ``<student>/<exercise>/results.json`` and ``feedback.txt`` (default: next to ``out``).
        on_result: called with each row as it is done (e.g. to show progress).

    Raises:
        Interrupted: on Ctrl-C, after killing the running sandboxes and checks and saving the finished rows.
        ValueError: no tests for any exercise the submissions were made for (``--root``), or an ambiguous layout
            (:class:`.gradebook.LayoutError`).
    """
    running = Running()
    try:
        found = (
            submissions
            if isinstance(submissions, Found)
            else find_submissions(submissions, layout, exercise, running, jobs)
        )
    except KeyboardInterrupt:
        running.kill_all()
        raise Interrupted(Gradebook({}, []), 0) from None
    if exercise:
        for s in found.submissions:
            s.exercise = s.exercise or (exercise if not s.error else None)
    suites, missing = load_suites(root, found.submissions) if found.submissions else ({}, {})
    if exercise and exercise not in suites:
        suites[exercise] = load_suite(root, exercise)
    feedback = Path(feedback) if feedback is not None else Path(out).parent / f"{Path(out).stem}-feedback"
    book = Gradebook({name: suite.questions for name, suite in suites.items()}, [])
    book.write(out)
    todo, done, lock = [], {}, threading.Lock()
    for i, s in enumerate(found.submissions):
        if s.error or s.exercise not in suites:
            why = (
                s.error
                or missing.get(s.exercise)
                or (
                    "not an exercise notebook: it has no otter assignment name (start from the exercise's notebook in "
                    "exercises/, or pass --exercise)"
                )
            )
            done[i] = _ungraded(s, why)
        else:
            todo.append(i)
    if not todo:
        book.rows = [done[j] for j in sorted(done)]
        book.write(out)
        return book
    require_bwrap()
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    subs = found.submissions
    futures = {
        pool.submit(grade_submission, subs[i], suites[subs[i].exercise], feedback, timeout, running, limits): i
        for i in todo
    }
    try:
        for i in sorted(done):
            if on_result is not None:
                on_result(done[i])
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in finished:
                i = futures[future]
                try:
                    row = future.result()
                except Exception as err:  # a bug here must not lose the other rows
                    row = _ungraded(subs[i], f"internal grading error: {type(err).__name__}: {err}"[:300])
                with lock:
                    done[i] = row
                    book.rows = [done[j] for j in sorted(done)]
                    book.write(out)
                if on_result is not None:
                    on_result(row)
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        running.kill_all()
        book.rows = [done[j] for j in sorted(done)]
        book.write(out)
        raise Interrupted(book, len(subs)) from None
    pool.shutdown(wait=True)
    book.rows = [done[j] for j in sorted(done)]
    book.write(out)
    return book
