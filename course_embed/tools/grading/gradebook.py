"""Finding submissions (nested folders, one folder per student), who sent them, and the gradebook CSV."""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from .assign import atomic_write
from .compare import Question
from .submission import notebook_exercise, read_submission

SUFFIXES = (".ipynb", ".zip")
_EXPORT_STAMP = re.compile(r"_(\d{4})_(\d{2})_(\d{2})T(\d{2})_(\d{2})_(\d{2})")  # grader.export()'s zip names


@dataclass
class Found:
    """What a search for submissions found: the files to grade, each with its student, and what it skipped."""

    paths: list[Path] = field(default_factory=list)
    students: dict[Path, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # "path: why"


def find_submissions(paths: list[str | Path]) -> Found:
    """Notebooks and exported zips among ``paths``, searching folders at any depth.

    The student of a file is the folder holding it, as a path under the given folder (the usual LMS download,
    one folder per student, gives ``alice``; ``week3/alice`` when nested deeper), or, for a file given directly or
    lying at the top of the folder, its name without the suffix and without an export time stamp. When a student
    handed in more than once, the latest wins: the newest export time stamp in the file name, else the newest
    modification time; the others are skipped and reported. Other files (``notes.txt``, checkpoints) are skipped
    and reported as well.
    """
    found = Found()
    candidates: list[tuple[Path, str]] = []
    for given in map(Path, paths):
        if given.is_dir():
            for path in sorted(given.rglob("*")):
                if not path.is_file():
                    continue
                rel = path.relative_to(given)
                if ".ipynb_checkpoints" in rel.parts or path.suffix not in SUFFIXES:
                    found.skipped.append(f"{path}: not a notebook or an exported zip")
                    continue
                candidates.append((path, rel.parent.as_posix() if len(rel.parts) > 1 else _stem_student(path)))
        elif given.suffix in SUFFIXES or not given.exists():
            candidates.append((given, _stem_student(given)))
        else:
            found.skipped.append(f"{given}: not a notebook or an exported zip")
    latest: dict[str, Path] = {}
    for path, student in candidates:
        if student in latest and _submitted(latest[student]) >= _submitted(path):
            found.skipped.append(f"{path}: {student} handed in a later file ({latest[student].name}); latest wins")
            continue
        if student in latest:
            found.skipped.append(f"{latest[student]}: {student} handed in a later file ({path.name}); latest wins")
        latest[student] = path
    found.paths = [latest[s] for s in sorted(latest)]
    found.students = {p: s for s, p in latest.items()}
    return found


def _stem_student(path: Path) -> str:
    stem = _EXPORT_STAMP.split(path.stem)[0] if _EXPORT_STAMP.search(path.stem) else path.stem
    return stem


def _submitted(path: Path) -> float:
    """When ``path`` was handed in: the time stamp ``grader.export()`` puts in the name, else the file's mtime."""
    match = _EXPORT_STAMP.search(path.name)
    if match:
        return datetime(*map(int, match.groups()), tzinfo=UTC).timestamp()
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def submitted_at(path: Path) -> str:
    """ISO time (UTC, seconds) at which ``path`` was handed in, as :func:`find_submissions` ranks it."""
    return datetime.fromtimestamp(_submitted(path), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def infer_exercise(paths: list[Path]) -> str:
    """The exercise most of the readable submissions were made for; ``ValueError`` when that is unclear."""
    names = Counter(notebook_exercise(nb) for nb, _ in map(read_submission, paths) if nb is not None)
    names.pop(None, None)
    ranked = names.most_common(2)
    if not ranked or (len(ranked) == 2 and ranked[0][1] == ranked[1][1]):
        raise ValueError(
            f"cannot tell which exercise these submissions are for (found {dict(names) or 'none'}); "
            f"pass --exercise NN_topic"
        )
    return ranked[0][0]


@dataclass
class GradeRow:
    """One submission's line in the gradebook; ``error`` says what went wrong, empty when nothing did."""

    student: str
    submission: str
    exercise: str
    scores: dict[str, float] = field(default_factory=dict)
    error: str = ""
    submitted: str = ""
    graded_at: str = ""

    @property
    def total(self) -> float:
        return sum(self.scores.values())


@dataclass
class Gradebook:
    """The rows of one batch, in the order of the students."""

    exercise: str
    questions: list[Question]
    rows: list[GradeRow]

    @property
    def possible(self) -> float:
        return sum(q.points for q in self.questions)

    def write(self, path: str | Path) -> None:
        """Write the gradebook CSV atomically: readers see the old file or the new one, never a partial one."""
        text = io.StringIO(newline="")
        writer = csv.writer(text)
        writer.writerow(
            [
                "student",
                "submission",
                "submitted",
                "graded_at",
                "exercise",
                *(q.name for q in self.questions),
                "total",
                "possible",
                "error",
            ]
        )
        for row in self.rows:
            writer.writerow(
                [
                    row.student,
                    row.submission,
                    row.submitted,
                    row.graded_at,
                    row.exercise,
                    *(f"{row.scores.get(q.name, 0.0):g}" for q in self.questions),
                    f"{row.total:g}",
                    f"{self.possible:g}",
                    row.error,
                ]
            )
        atomic_write(Path(path), text.getvalue().encode())

    def summary(self) -> str:
        """A few lines for the terminal: totals, per-question means, and every error."""
        n = len(self.rows)
        totals = sorted(r.total for r in self.rows)
        broken = [r for r in self.rows if r.error]
        lines = [f"{self.exercise}: graded {n} submission{'s' * (n != 1)}, {len(broken)} with errors"]
        if n:
            full = sum(t >= self.possible for t in totals)
            lines.append(
                f"  total: mean {sum(totals) / n:.2f}, median {totals[n // 2]:g}, "
                f"out of {self.possible:g}; {full} with full marks"
            )
            lines.append(
                "  mean per question: "
                + ", ".join(
                    f"{q.name} {sum(r.scores.get(q.name, 0) for r in self.rows) / n:.2f}/{q.points:g}"
                    for q in self.questions
                )
            )
        lines += [f"  {r.student} ({r.submission}): {r.error}" for r in broken]
        return "\n".join(lines)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def safe_name(student: str) -> str:
    """A folder name for ``student``'s feedback."""
    return re.sub(r"[^A-Za-z0-9_.@-]+", "_", student).strip("._") or "student"
