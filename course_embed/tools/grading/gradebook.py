"""Finding submissions (nested folders, one folder per student), who sent them, and the gradebook CSV."""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from .assign import atomic_write
from .compare import Question
from .submission import notebook_exercise, read_submission
from .text import cell, plain

SUFFIXES = (".ipynb", ".zip")


@dataclass
class Found:
    """What a search for submissions found: the files to grade, each with its student, and what it skipped."""

    paths: list[Path] = field(default_factory=list)
    students: dict[Path, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # "path: why"


def find_submissions(paths: list[str | Path]) -> Found:
    """Notebooks and exported zips among ``paths``, searching folders at any depth.

    The student of a file is the folder holding it, as a path under the given folder (the usual LMS download,
    one folder per student, gives ``alice``; ``week3/alice`` when nested deeper); for a file lying at the top of
    the folder, its file name (``alice_2099.ipynb``: never merged with the folder ``alice``); for a file given
    directly, its name without the suffix. When a student's folder holds more than one submission, the latest
    wins (the newest modification time); the others are skipped and reported. Symbolic links (to files or
    folders), files that are not notebooks or zips and checkpoints are skipped and reported as well. Nothing here
    depends on what a file name claims: the time a file was handed in is its modification time (which the LMS
    download keeps).
    """
    found = Found()
    candidates: list[tuple[Path, str]] = []
    for given in map(Path, paths):
        if given.is_symlink():
            found.skipped.append(f"{given}: a symbolic link (not followed)")
        elif given.is_dir():
            for path, rel in _walk(given, found):
                if ".ipynb_checkpoints" in rel.parts or path.suffix not in SUFFIXES:
                    found.skipped.append(f"{path}: not a notebook or an exported zip")
                    continue
                candidates.append((path, rel.parent.as_posix() if len(rel.parts) > 1 else path.name))
        elif given.suffix in SUFFIXES or not given.exists():
            candidates.append((given, given.stem))
        else:
            found.skipped.append(f"{given}: not a notebook or an exported zip")
    latest: dict[str, Path] = {}
    for path, student in candidates:
        if student in latest and (_submitted(latest[student]), latest[student].name) >= (_submitted(path), path.name):
            found.skipped.append(f"{path}: {student} handed in a later file ({latest[student].name}); latest wins")
            continue
        if student in latest:
            found.skipped.append(f"{latest[student]}: {student} handed in a later file ({path.name}); latest wins")
        latest[student] = path
    found.paths = [latest[s] for s in sorted(latest)]
    found.students = {p: s for s, p in latest.items()}
    return found


def _walk(folder: Path, found: Found):
    """``(path, path relative to folder)`` of every regular file under ``folder``, in order; symbolic links are
    reported in ``found.skipped`` and not followed."""
    for parent, dirs, files in os.walk(folder):
        dirs.sort()
        for name in list(dirs):
            if os.path.islink(os.path.join(parent, name)):
                found.skipped.append(f"{os.path.join(parent, name)}: a symbolic link (not followed)")
                dirs.remove(name)
        for name in sorted(files):
            path = Path(parent) / name
            if path.is_symlink():
                found.skipped.append(f"{path}: a symbolic link (not followed)")
            elif path.is_file():
                yield path, path.relative_to(folder)


def _submitted(path: Path) -> float:
    """When ``path`` was handed in: the file's modification time (never a time stamp in its name)."""
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0


def submitted_at(path: Path) -> str:
    """ISO time (UTC, seconds) at which ``path`` was handed in, as :func:`find_submissions` ranks it."""
    try:
        return datetime.fromtimestamp(_submitted(path), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return ""


def infer_exercise(paths: list[Path]) -> str:
    """The exercise most of the readable submissions were made for; ``ValueError`` when that is unclear.
    Unreadable submissions are passed over here (their rows say why)."""
    names: Counter = Counter()
    for path in paths:
        nb, _ = read_submission(path)
        if nb is not None:
            names[notebook_exercise(nb)] += 1
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
                    cell(row.student),
                    cell(row.submission),
                    row.submitted,
                    row.graded_at,
                    row.exercise,
                    *(f"{row.scores.get(q.name, 0.0):g}" for q in self.questions),
                    f"{row.total:g}",
                    f"{self.possible:g}",
                    cell(row.error),
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
        lines += [f"  {plain(r.student)} ({plain(r.submission)}): {plain(r.error)}" for r in broken]
        return "\n".join(lines)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def safe_name(student: str) -> str:
    """A folder name for ``student``'s feedback, different for different students: the name itself where it is
    a plain one, else its plain characters and a hash of the whole name (``alice!`` is not ``alice``)."""
    plain_name = re.sub(r"[^A-Za-z0-9_.@-]+", "_", student).strip("._")[:80] or "student"
    if plain_name == student:
        return plain_name
    return f"{plain_name}-{hashlib.sha1(student.encode('utf-8', 'surrogateescape')).hexdigest()[:10]}"
