"""Grading speed: N copies of an exercise's solution, one folder per student, graded with `course-embed grade`'s code.

    python benchmarks/grading.py --exercise 03_sinusoidal --count 12 --jobs 2

Prints one table: submissions, wall time, seconds per submission, the time 200 submissions would take at that rate,
the load average before, during (the mean of one sample every 10 s) and after, and the date and machine (on a shared
machine, compare runs made one after the other under the same load). Each submission starts its own bubblewrap
sandbox, Python, IPython and torch, and its checks run in a process of their own.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import torch

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
        load, samples, done = os.getloadavg()[0], [], threading.Event()

        def sample():
            while not done.wait(10):
                samples.append(os.getloadavg()[0])

        sampler = threading.Thread(target=sample, daemon=True)
        began = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        start = time.monotonic()
        sampler.start()
        book = grade_batch([Path(tmp) / "batch"], Path(tmp) / "gradebook.csv", exercise=args.exercise, jobs=args.jobs)
        wall = time.monotonic() - start
        done.set()
    full = sum(r.total >= book.possible(args.exercise) for r in book.rows)
    errors = sum(bool(r.error) for r in book.rows)
    n = len(book.rows)
    during = sum(samples) / len(samples) if samples else os.getloadavg()[0]
    print(f"{began}, {platform.machine()}, {os.cpu_count()} CPUs ({_cpu_model()}), torch {torch.__version__}")
    print("| exercise | submissions | jobs | full marks | errors | wall (s) | s per submission | 200 at this rate "
          "(min) | load before | load during | load after |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.exercise} | {n} | {args.jobs} | {full} | {errors} | {wall:.1f} | {wall / n:.2f} | "
        f"{200 * wall / n / 60:.1f} | {load:.1f} | {during:.1f} | {os.getloadavg()[0]:.1f} |"
    )


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()
