"""course-embed: project tasks for maintainers and instructors.

course-embed execute [NOTEBOOK ...]   execute chapters in place (default: every book/*.ipynb)
course-embed exercises [NAME ...]     regenerate student notebooks from exercises/source
course-embed grade SUBMISSION ...     grade submissions, each in a sandbox, into a gradebook CSV and feedback
course-embed release OUT              copy the course for learners: no solutions, no hidden tests
course-embed status [NOTEBOOK ...]    measure chapters on CPU and rewrite book/status.md (default: every chapter)
course-embed translations [--check]   refresh the Chinese edition's catalogues from the English pages; list what is left
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path


def _execute(args: argparse.Namespace) -> int:
    from .notebooks import execute_notebook
    from .progress import Steps

    paths = [Path(p) for p in args.notebooks] or sorted(Path("book").glob("*.ipynb"))
    if not paths:
        print("no notebooks given and none found in book/; run from the project root", file=sys.stderr)
        return 2
    missing = [path for path in paths if not path.is_file()]
    if missing:
        print(f"{missing[0]}: no such notebook", file=sys.stderr)
        return 2
    steps = Steps(len(paths))
    for path in paths:
        with steps.step(str(path), "executing"):
            seconds = execute_notebook(path, timeout=args.timeout)
        print(f"{path}: executed in {seconds:.1f} s")
    return 0


def _exercises(args: argparse.Namespace) -> int:
    from .grading import find_exercises, get_exercise, is_stale, regenerate

    try:
        chosen = [get_exercise(n, args.root) for n in args.names] or find_exercises(args.root)
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    if not chosen:
        print(f"no exercise sources in {args.root}/source; run from the project root", file=sys.stderr)
        return 2
    stale = []
    for exercise in chosen:
        if args.check:
            if is_stale(exercise):
                stale.append(exercise.student)
                print(f"{exercise.student}: stale, run course-embed exercises {exercise.name}")
            else:
                print(f"{exercise.student}: up to date")
        else:
            built = regenerate(exercise, run_tests=args.run_tests)
            print(f"{exercise.name}: wrote {built.student}")
    return 1 if stale else 0


def _size(option: str):
    """An argparse type reading a size such as 4G for ``option``, with an error that names it."""

    def parse(text: str) -> int:
        from .grading.limits import parse_size

        try:
            return parse_size(text, option)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


def _grade(args: argparse.Namespace) -> int:
    from .grading.limits import Limits

    try:
        limits = Limits(args.memory, args.file_size, args.disk, args.processes, args.cpu_time)
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    # `kill` (SIGTERM) stops the batch as Ctrl-C does; it is the way to stop a command started with SIGINT ignored
    # (a background job of a script), which Ctrl-C cannot reach
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None
    try:
        return _grade_batch(args, limits)
    except _Terminated:
        return 143
    except KeyboardInterrupt:
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt."""


def _terminated(signum, frame):
    raise _Terminated


class _Progress:
    """One line per graded submission on stderr: how many of how many, the student, the exercise, the score or the
    error, and the time since the batch started (plain lines, with or without a terminal)."""

    def __init__(self):
        self.start, self.done, self.total = time.monotonic(), 0, 0

    def found(self, found) -> None:
        for skipped in found.skipped:
            print(f"skipped {skipped}", file=sys.stderr)
        self.total = len(found.submissions)
        print(f"grading {self.total} submission{'s' * (self.total != 1)} ({self._elapsed()})", file=sys.stderr)

    def __call__(self, row) -> None:
        from .grading.text import bounded

        self.done += 1
        result = f"error: {bounded(row.error, 100)}" if row.error else f"{row.total:g} points"
        exercise = row.exercise or "no exercise"
        print(f"[{self.done}/{self.total}] {row.student} ({exercise}): {result} ({self._elapsed()})", file=sys.stderr)

    def _elapsed(self) -> str:
        return f"{time.monotonic() - self.start:.0f} s"


def _grade_batch(args: argparse.Namespace, limits) -> int:
    from .grading import SandboxUnavailable
    from .grading.batch import Interrupted, grade_batch
    from .grading.gradebook import find_submissions, shown
    from .grading.submission import Running

    progress, reading = _Progress(), Running()
    try:
        print("reading the submissions (each in a limited process of its own)", file=sys.stderr)
        try:
            found = find_submissions(args.submissions, args.layout, args.exercise, reading, args.jobs)
        except KeyboardInterrupt:
            reading.kill_all()  # the children reading the files
            print("\ninterrupted while reading the submissions; nothing graded", file=sys.stderr)
            raise
        progress.found(found)
        book = grade_batch(
            found,
            args.out,
            exercise=args.exercise,
            root=args.root,
            jobs=args.jobs,
            timeout=args.timeout,
            limits=limits,
            feedback=args.feedback,
            on_result=progress,
        )
    except (ValueError, SandboxUnavailable) as err:
        print(err, file=sys.stderr)
        return 2
    except Interrupted as stop:
        print(f"\n{stop}; gradebook: {args.out}", file=sys.stderr)
        return 143 if isinstance(stop.__context__, _Terminated) else 130
    print(book.summary())
    print(f"gradebook: {args.out}")
    if not book.rows:
        print(
            f"no submissions found in {', '.join(map(shown, args.submissions))} (a notebook .ipynb or "
            f"an exported .zip, at any depth)",
            file=sys.stderr,
        )
        return 1
    return 0


def _release(args: argparse.Namespace) -> int:
    from .grading.release import make_release

    try:
        written = make_release(".", args.out)
    except (ValueError, FileExistsError) as err:
        print(err, file=sys.stderr)
        return 2
    print(f"wrote {len(written)} files to {args.out} (no exercises/source, no hidden tests, no solutions)")
    return 0


def _status(args: argparse.Namespace) -> int:
    from .status import update

    def show(path, record):
        verdict = "outputs reproduce" if record["reproduces"] else f"DIFFERS in {', '.join(record['failed_cells'])}"
        print(f"{path}: {record['seconds']:.1f} s on CPU, {record['cells']} cells, {verdict}")

    try:
        records = update(".", args.notebooks, timeout=args.timeout, progress=show)
    except (ValueError, FileNotFoundError) as err:
        print(err, file=sys.stderr)
        return 2
    print("wrote book/status.json and book/status.md")
    # The page's numbers changed: its Chinese catalogue follows (cells without words are kept as they are).
    from .translations import main as translations

    translations([])
    return 0 if all(r["reproduces"] for r in records.values()) else 1


def _translations(args: argparse.Namespace) -> int:
    from .translations import main

    return main(["--check"] if args.check else [])


def _grade_options(sub) -> None:
    """``course-embed grade``: its help states the limits the grader applies, from the code that applies them."""
    from .grading.compare import CHECK_MEMORY, CHECK_SECONDS
    from .grading.limits import Limits, format_size

    default = Limits()
    gr = sub.add_parser(
        "grade",
        help="grade submissions, each in a bubblewrap sandbox, into a gradebook CSV",
        description="Grade submissions into a gradebook CSV, one row per (student, exercise), and feedback per "
        "student. Each submission runs in a bubblewrap sandbox; its outputs are checked outside it, in a process "
        f"of their own limited to {CHECK_SECONDS} s of CPU time and {format_size(CHECK_MEMORY)} of memory. Run it "
        "from the root folder of the instructor's copy of the course (with exercises/source/), or name its "
        "exercises/ folder (not the course's root) with --root. The "
        "hidden tests' inputs are fixed per exercise by the environment variable COURSE_EMBED_GRADING_KEY (keep "
        "it to yourself; empty when unset), so a notebook graded again gets the same grade.",
    )
    gr.add_argument(
        "submissions",
        nargs="+",
        help="notebooks, exported zips, or folders of them: a folder of student folders, student folders "
        "(subs/*), or both (see --layout)",
    )
    gr.add_argument(
        "--layout",
        choices=("auto", "students", "student"),
        default="auto",
        help="who handed in the files in a folder given: 'students': it holds one folder per student (any depth "
        "inside each); 'student': it is one student's; 'auto' (default): one student's when it has notebooks at "
        "its top, else one folder per student, and a refusal naming the files where that is ambiguous",
    )
    gr.add_argument("--out", default="gradebook.csv", help="gradebook CSV to write (default: gradebook.csv)")
    gr.add_argument(
        "--feedback",
        help="folder for each student's <exercise>/results.json and feedback.txt (default: <out>-feedback next to "
        "the gradebook)",
    )
    gr.add_argument(
        "--exercise",
        help="grade only this exercise, e.g. 01_token_embedding (default: each notebook for the exercise it was "
        "made for)",
    )
    gr.add_argument("--jobs", type=int, default=2, help="submissions graded in parallel (default 2)")
    gr.add_argument(
        "--timeout", type=float, default=300, help="wall-clock seconds allowed per submission's sandbox (default 300)"
    )
    limits = gr.add_argument_group(
        "resource limits of each sandbox",
        "A submission stopped at one is graded like one that timed out: the questions it checked before count, and "
        "its error column names the limit, its value and the option to raise. Sizes: 4G, 512M, 100K or bytes. "
        "Every limit holds when grading as root too: the submission then runs as an unprivileged user id of its "
        "own, never as root.",
    )
    limits.add_argument(
        "--memory",
        type=_size("--memory"),
        default=default.memory,
        metavar="SIZE",
        help=f"address space of each process (RLIMIT_AS), and of all together where a memory cgroup can be made "
        f"(default {_short(default.memory)}; a solution peaks at 0.82G)",
    )
    limits.add_argument(
        "--file-size",
        type=_size("--file-size"),
        default=default.file_size,
        metavar="SIZE",
        help=f"largest file a process may write (RLIMIT_FSIZE; default {_short(default.file_size)})",
    )
    limits.add_argument(
        "--disk",
        type=_size("--disk"),
        default=default.disk,
        metavar="SIZE",
        help="size of each writable folder (/work, /tmp, /dev/shm: tmpfs in memory) and of the sandbox's files on "
        f"this disk, its outputs and what it prints (default {_short(default.disk)})",
    )
    limits.add_argument(
        "--processes",
        type=int,
        default=default.processes,
        metavar="N",
        help=f"processes and threads in the sandbox (RLIMIT_NPROC; default {default.processes})",
    )
    limits.add_argument(
        "--cpu-time",
        type=int,
        default=default.cpu_time,
        metavar="SECONDS",
        help=f"CPU seconds of each process, a backstop to --timeout (RLIMIT_CPU; default {default.cpu_time})",
    )
    gr.add_argument(
        "--root",
        default="exercises",
        help="the instructor's exercises folder, with checks/ and source/ (default: exercises, from the course's "
        "root folder; give it when grading from elsewhere)",
    )
    gr.set_defaults(func=_grade)


def _short(nbytes: int) -> str:
    """A size as the options take it: ``4G``, ``512M``."""
    from .grading.limits import format_size

    return format_size(nbytes).replace(" ", "").replace("iB", "")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="course-embed", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("execute", help="execute notebooks in place with reproducible outputs")
    run.add_argument("notebooks", nargs="*", help="notebooks to execute (default: book/*.ipynb)")
    run.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell (default 600)")
    run.set_defaults(func=_execute)
    ex = sub.add_parser("exercises", help="regenerate student notebooks from exercises/source")
    ex.add_argument("names", nargs="*", help="exercises to regenerate, e.g. 01_token_embedding (default: all)")
    ex.add_argument("--check", action="store_true", help="only report stale student notebooks (exit 1 if any)")
    ex.add_argument("--run-tests", action="store_true", help="also run the public tests against the solutions")
    ex.add_argument("--root", default="exercises", help="the exercises folder (default: exercises)")
    ex.set_defaults(func=_exercises)
    _grade_options(sub)
    rel = sub.add_parser("release", help="copy the course for learners without solutions or hidden tests")
    rel.add_argument("out", help="folder to create (must not exist)")
    rel.set_defaults(func=_release)
    st = sub.add_parser("status", help="measure chapters on CPU with strict nbval; rewrite the execution status page")
    st.add_argument("notebooks", nargs="*", help="chapters to measure (default: every chapter in _toc.yml)")
    st.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell (default 600)")
    st.set_defaults(func=_status)
    tr = sub.add_parser(
        "translations", help="refresh the Chinese edition's catalogues; list untranslated or fuzzy entries"
    )
    tr.add_argument("--check", action="store_true", help="only list what is left; exit 1 unless all is translated")
    tr.set_defaults(func=_translations)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
