"""The ``course-embed`` command: project tasks for maintainers and instructors.

    course-embed execute [NOTEBOOK ...]   execute chapters in place (default: every book/*.ipynb)
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
