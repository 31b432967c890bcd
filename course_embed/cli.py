"""The ``course-embed`` command: project tasks for maintainers and instructors.

    course-embed execute [NOTEBOOK ...]   execute chapters in place (default: every book/*.ipynb)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="course-embed", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("execute", help="execute notebooks in place with reproducible outputs")
    run.add_argument("notebooks", nargs="*", help="notebooks to execute (default: book/*.ipynb)")
    run.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell (default 600)")
    run.set_defaults(func=_execute)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
