"""course-embed: project tasks for maintainers and instructors.

    course-embed execute [NOTEBOOK ...]   execute chapters in place (default: every book/*.ipynb)
    course-embed exercises [NAME ...]     regenerate student notebooks and autograders from exercises/source
    course-embed grade SUBMISSION ...     grade exercise submissions into a gradebook CSV
    course-embed status [NOTEBOOK ...]    measure chapters on CPU and rewrite book/status.md (default: every chapter)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _execute(args: argparse.Namespace) -> int:
    from .notebooks import execute_notebook

    paths = [Path(p) for p in args.notebooks] or sorted(Path("book").glob("*.ipynb"))
    if not paths:
        print("no notebooks given and none found in book/; run from the project root", file=sys.stderr)
        return 2
    for path in paths:
        if not path.is_file():
            print(f"{path}: no such notebook", file=sys.stderr)
            return 2
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
            built = regenerate(exercise, run_tests=not args.no_run_tests)
            print(f"{exercise.name}: wrote {built.student} and {built.autograder}")
    return 1 if stale else 0


def _grade(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .grading import expand_submissions, grade_batch

    paths = expand_submissions(args.submissions)
    with tqdm(total=len(paths), unit="submission", desc="grading", file=sys.stderr,
              disable=None) as bar:  # disable=None: no bar when stderr is not a terminal
        try:
            book = grade_batch(paths, args.out, exercise=args.exercise, root=args.root, autograder=args.autograder,
                               jobs=args.jobs, timeout=args.timeout, on_result=lambda row: bar.update())
        except ValueError as err:
            print(err, file=sys.stderr)
            return 2
    print(book.summary())
    print(f"gradebook: {args.out}")
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
    return 0 if all(r["reproduces"] for r in records.values()) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="course-embed", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("execute", help="execute notebooks in place with reproducible outputs")
    run.add_argument("notebooks", nargs="*", help="notebooks to execute (default: book/*.ipynb)")
    run.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell (default 600)")
    run.set_defaults(func=_execute)
    ex = sub.add_parser("exercises", help="regenerate student notebooks and autograders from exercises/source")
    ex.add_argument("names", nargs="*", help="exercises to regenerate, e.g. 01_token_embedding (default: all)")
    ex.add_argument("--check", action="store_true", help="only report stale student notebooks (exit 1 if any)")
    ex.add_argument("--no-run-tests", action="store_true", help="skip running the tests against the solutions")
    ex.add_argument("--root", default="exercises", help="the exercises folder (default: exercises)")
    ex.set_defaults(func=_exercises)
    gr = sub.add_parser("grade", help="grade exercise submissions (otter-grader, no Docker) into a gradebook CSV")
    gr.add_argument("submissions", nargs="+", help="submitted notebooks or exported zips, or folders of them")
    gr.add_argument("--out", default="gradebook.csv", help="gradebook CSV to write (default: gradebook.csv)")
    gr.add_argument("--exercise", help="exercise name, e.g. 01_token_embedding (default: from the notebooks)")
    gr.add_argument("--jobs", type=int, default=2, help="submissions graded in parallel (default 2)")
    gr.add_argument("--timeout", type=float, default=300, help="seconds allowed per submission (default 300)")
    gr.add_argument("--root", default="exercises", help="the exercises folder (default: exercises)")
    gr.add_argument("--autograder", help="an autograder zip to use (default: the exercise's, built on demand)")
    gr.set_defaults(func=_grade)
    st = sub.add_parser("status", help="measure chapters on CPU with strict nbval; rewrite the execution status page")
    st.add_argument("notebooks", nargs="*", help="chapters to measure (default: every chapter in _toc.yml)")
    st.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell (default 600)")
    st.set_defaults(func=_status)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
