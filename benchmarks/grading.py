"""Grading speed: N copies of an exercise's solution, one folder per student, graded with `course-embed grade`'s code.

    python benchmarks/grading.py --exercise 03_sinusoidal --count 12 --jobs 2

Prints one table: submissions, wall time, seconds per submission, and the load average before and after (on a
shared machine, compare runs made one after the other under the same load). Each submission starts its own
bubblewrap sandbox, Python, IPython and torch.
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
import time
from pathlib import Path

import nbformat

from course_embed.tools.grading import ANSWER_TAG, assign
from course_embed.tools.grading.batch import grade_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exercise", default="03_sinusoidal")
    parser.add_argument("--count", type=int, default=12)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        built = assign(Path("exercises/source") / f"{args.exercise}.ipynb", Path(tmp) / "build")
        student, solution = (nbformat.read(p, as_version=4) for p in (built.student, built.solution))
        nb = copy.deepcopy(student)
        for i, cell in enumerate(nb.cells):
            if ANSWER_TAG in cell.metadata.get("tags", []):
                cell.source = solution.cells[i].source
        for k in range(args.count):
            (Path(tmp) / "batch" / f"student{k:03d}").mkdir(parents=True)
            nbformat.write(nb, Path(tmp) / "batch" / f"student{k:03d}" / f"{args.exercise}.ipynb")
        load = os.getloadavg()[0]
        start = time.monotonic()
        book = grade_batch([Path(tmp) / "batch"], Path(tmp) / "gradebook.csv", exercise=args.exercise, jobs=args.jobs)
        wall = time.monotonic() - start
    full = sum(r.total == book.possible(args.exercise) for r in book.rows)
    n = len(book.rows)
    print("| exercise | submissions | jobs | full marks | wall (s) | s per submission | load before | load after |")
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.exercise} | {n} | {args.jobs} | {full} | {wall:.1f} | {wall / n:.2f} | {load:.1f} | "
        f"{os.getloadavg()[0]:.1f} |"
    )


if __name__ == "__main__":
    main()
