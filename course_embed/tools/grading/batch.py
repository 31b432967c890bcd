"""Grading a batch: every submission in its own sandbox, two at a time, the gradebook saved after each one."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from .assign import EXERCISES
from .compare import Suite, load_suite
from .feedback import write_feedback
from .gradebook import Found, Gradebook, GradeRow, find_submissions, infer_exercise, now, safe_name, submitted_at
from .limits import Limits
from .sandbox import require_bwrap
from .submission import Running, grade_notebook, notebook_exercise, read_submission


class Interrupted(Exception):
    """Ctrl-C during a batch: the finished rows were kept (``book``), the running sandboxes killed."""

    def __init__(self, book: Gradebook, total: int):
        super().__init__(f"interrupted: {len(book.rows)} of {total} submissions graded and kept")
        self.book, self.total = book, total


def grade_submission(
    path: Path,
    student: str,
    suite: Suite,
    feedback: Path | None,
    timeout: float = 300.0,
    running: Running | None = None,
    limits: Limits | None = None,
) -> GradeRow:
    """Grade one file; never raises for a broken submission (its row says what went wrong)."""
    row = GradeRow(
        student, str(path), suite.exercise, {q.name: 0.0 for q in suite.questions}, submitted=submitted_at(path)
    )
    nb, error = read_submission(path)
    results, seconds = [], 0.0
    if nb is None:
        row.error = error
    elif (made_for := notebook_exercise(nb)) != suite.exercise:
        row.error = (
            f"wrong exercise: this notebook is for {made_for}, not {suite.exercise}"
            if made_for
            else f"not an exercise notebook: it has no otter assignment name "
            f"(start from exercises/{suite.exercise}.ipynb)"
        )
    else:
        graded = grade_notebook(nb, suite, timeout, running, limits)
        results, seconds, row.error = graded.results, graded.seconds, graded.error
        for r in results:
            row.scores[r.question] += r.score
    row.graded_at = now()
    if running is not None and running.stopped.is_set():
        return row  # interrupted: this row is not kept, so no feedback either
    if feedback is not None:
        write_feedback(
            feedback / safe_name(student), student, suite.exercise, suite.questions, results, row.error, seconds
        )
    return row


def grade_batch(
    submissions: list[str | Path] | Found,
    out: str | Path,
    *,
    exercise: str | None = None,
    root: str | Path = EXERCISES,
    jobs: int = 2,
    timeout: float = 300.0,
    limits: Limits | None = None,
    feedback: str | Path | None = None,
    on_result: Callable[[GradeRow], None] | None = None,
) -> Gradebook:
    """Grade many submissions of one exercise and write the gradebook CSV ``out``.

    Args:
        submissions: notebooks, exported zips, or folders of them (searched at any depth; see
            :func:`.gradebook.find_submissions` for students and resubmissions), or what that function found.
        out: the CSV, rewritten atomically after every graded submission; written (header only) for an empty batch.
        exercise: ``NN_topic``; default: the exercise most submissions were made for.
        root: the instructor's exercises folder (``checks/`` and ``source/`` with the hidden tests).
        jobs: sandboxes running at the same time.
        timeout: seconds one submission may run before its sandbox is killed (answered questions still count).
        limits: memory, file size, disk, processes and CPU time of each sandbox (:class:`.limits.Limits`;
            default ``Limits()``); a submission stopped at one is graded like one stopped by ``timeout``.
        feedback: folder for ``<student>/results.json`` and ``feedback.txt`` (default: next to ``out``).
        on_result: called with each row as it is done (e.g. to advance a progress bar).

    Raises:
        Interrupted: on Ctrl-C, after killing the running sandboxes and saving the finished rows.
    """
    found = submissions if isinstance(submissions, Found) else find_submissions(submissions)
    paths = found.paths
    exercise = exercise or infer_exercise(paths)
    suite = load_suite(root, exercise)
    feedback = Path(feedback) if feedback is not None else Path(out).parent / f"{Path(out).stem}-feedback"
    book = Gradebook(exercise, suite.questions, [])
    book.write(out)
    if not paths:
        return book
    require_bwrap()
    running, done, lock = Running(), {}, threading.Lock()
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    futures = {
        pool.submit(grade_submission, p, found.students.get(p, p.stem), suite, feedback, timeout, running, limits): i
        for i, p in enumerate(paths)
    }
    try:
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in finished:
                i = futures[future]
                try:
                    row = future.result()
                except Exception as err:  # a bug here must not lose the other rows
                    row = GradeRow(
                        found.students.get(paths[i], paths[i].stem),
                        str(paths[i]),
                        exercise,
                        {q.name: 0.0 for q in suite.questions},
                        f"internal grading error: {type(err).__name__}: {err}"[:300],
                        graded_at=now(),
                    )
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
        raise Interrupted(book, len(paths)) from None
    pool.shutdown(wait=True)
    return book
