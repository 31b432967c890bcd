"""Finding submissions (nested folders, one folder per student), who sent them, and the gradebook CSV."""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from .assign import atomic_write
from .compare import Question
from .notebook import Reading, Running, read_apart
from .text import CONTROL, cell, plain

SUFFIXES = (".ipynb", ".zip")
LAYOUTS = ("auto", "students", "student")


class LayoutError(ValueError):
    """The folders given do not say who handed in what: the message names the files and the option that decides."""


@dataclass
class Submission:
    """One file to grade: who handed it in (a printable name, different for different students), the exercise it
    was made for (``None`` when it names none or cannot be read) and why it cannot be read."""

    path: Path
    student: str
    exercise: str | None = None
    error: str = ""


@dataclass
class Found:
    """What a search for submissions found: one submission per (student, exercise), and what it skipped."""

    submissions: list[Submission] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "path: why", printable

    @property
    def paths(self) -> list[Path]:
        return [s.path for s in self.submissions]


@dataclass
class _Candidate:
    path: Path
    given: str  # the path as given, printable
    name: str  # the student's name (printable)
    qualified: str  # the name when another given folder holds the same name
    folder: str  # the folder holding the file, relative to the student's folder ("." for a file given directly)
    own_folder: bool  # the student's folder is a folder given


def shown(text: str | Path) -> str:
    """``text`` (a name or path from the file system) as one printable line, different for different texts:
    backslashes doubled, control and invisible characters as ``\\xNN`` or ``\\uNNNN``, and bytes that are not
    UTF-8 (Python's surrogate escapes) as ``\\xNN``: ``\\xe9lodie`` is the Latin-1 name, ``\\\\xe9lodie`` a
    folder literally named so."""
    out = []
    for char in str(text):
        code = ord(char)
        if char == "\\":
            out.append("\\\\")
        elif 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8, as os.fsdecode keeps it
            out.append(f"\\x{code - 0xDC00:02x}")
        elif CONTROL.match(char) or char in "\n\t" or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def find_submissions(
    paths: list[str | Path], layout: str = "auto", exercise: str | None = None, running=None, jobs: int = 2
) -> Found:
    """One submission per (student, exercise) among ``paths``: notebooks and exported zips, as files or folders.

    Who handed in a file (``layout``):

    * a file given directly is its own student's, named by its name without the suffix;
    * ``"student"``: each folder given is one student's (named by the folder), with everything under it;
    * ``"students"``: each folder given holds one folder per student (the usual download of a learning platform,
      GitHub Classroom's repositories), and everything under a student's folder, at any depth, is theirs; a file
      lying at the top of the given folder is a student of its own, named by its file name without the suffix;
    * ``"auto"``: a folder with notebooks at its top is one student's (``grade subs/*``), else it holds one folder
      per student; :class:`LayoutError` where that is ambiguous: two files of one exercise at the top of a
      student's folder (each a student's, or one student's resubmissions?), or one student's files of one
      exercise in two folders (a deeper level of students?).

    The same name under two given folders is two students, named by the folder given too (``sec1/alice``,
    ``sec2/alice``). Each file is read in a limited child process (:func:`.notebook.read_apart`) for the exercise
    it was made for (Ctrl-C or SIGTERM kills the children reading and reads no further file); of a student's files
    for one exercise the latest (modification time) wins and the others are listed in ``skipped``. With
    ``exercise``, files made for another exercise are skipped and listed. A file that cannot be read keeps a
    submission of its own (its row says why). Links, checkpoints and other files are skipped and listed.
    ``LayoutError`` names the files and the option that resolves it.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    found, candidates, seen = Found(), [], set()
    for given in map(Path, paths):
        label = shown(os.path.normpath(given))
        if given.is_symlink():
            found.skipped.append(f"{label}: a symbolic link (not followed)")
        elif given.is_dir():
            files = []
            for path, rel in _walk(given, found):
                if ".ipynb_checkpoints" in rel.parts or path.suffix not in SUFFIXES:
                    found.skipped.append(f"{shown(path)}: not a notebook or an exported zip")
                else:
                    files.append((path, rel))
            one = layout == "student" or (layout == "auto" and any(len(rel.parts) == 1 for _, rel in files))
            for path, rel in files:
                if one:
                    name = shown(os.path.basename(os.path.abspath(given)))
                    candidates.append(_Candidate(path, label, name, label, rel.parent.as_posix(), True))
                else:
                    name = shown(path.name if len(rel.parts) == 1 else rel.parts[0])  # a file: never its folder's
                    folder = "." if len(rel.parts) == 1 else Path(*rel.parts[1:]).parent.as_posix()
                    candidates.append(_Candidate(path, label, name, f"{label}/{name}", folder, False))
        elif given.suffix in SUFFIXES or not given.exists():
            label = shown(os.path.splitext(os.path.normpath(given))[0])
            candidates.append(_Candidate(given, label, shown(given.stem), label, ".", False))
        else:
            found.skipped.append(f"{label}: not a notebook or an exported zip")
    unique = []
    for c in candidates:
        key = os.path.realpath(c.path)
        if key in seen:
            found.skipped.append(f"{shown(c.path)}: given twice")
        else:
            seen.add(key)
            unique.append(c)
    givers: dict[str, set[str]] = {}
    for c in unique:
        givers.setdefault(c.name, set()).add(c.given)
    running = Running() if running is None else running
    pool = ThreadPoolExecutor(max(1, jobs))
    try:
        futures = [pool.submit(read_apart, c.path, running=running) for c in unique]
        while wait(futures, timeout=0.5).not_done:  # a short wait, so that Ctrl-C is seen at once
            pass
        readings = [f.result() for f in futures]
    except BaseException:  # Ctrl-C, SIGTERM: no file waits its turn, and the children reading now are killed
        pool.shutdown(wait=False, cancel_futures=True)
        running.kill_all()
        raise
    pool.shutdown()
    groups: dict[tuple, list[tuple[_Candidate, Reading]]] = {}
    for c, reading in zip(unique, readings, strict=True):
        student = c.name if len(givers[c.name]) == 1 else c.qualified
        if exercise and reading.exercise and reading.exercise != exercise:
            found.skipped.append(f"{shown(c.path)}: made for {reading.exercise}, not {exercise} (--exercise)")
            continue
        key = (student, reading.exercise) if reading.exercise else (student, None, c.path)
        groups.setdefault(key, []).append((c, reading))
    for (student, *_), group in sorted(groups.items(), key=lambda item: (item[0][0], str(item[0][1:]))):
        if layout == "auto" and len(group) > 1:
            _refuse_if_ambiguous(student, group)
        group.sort(key=lambda pair: (_submitted(pair[0].path), pair[0].path.name))
        latest, reading = group[-1]
        for older, _ in group[:-1]:
            found.skipped.append(
                f"{shown(older.path)}: {student} handed in a later file for {reading.exercise} "
                f"({shown(latest.path.name)}); latest wins"
            )
        found.submissions.append(Submission(latest.path, student, reading.exercise, reading.error))
    return found


def _refuse_if_ambiguous(student: str, group) -> None:
    """:class:`LayoutError` when files of one student and exercise could be several students' (see
    :func:`find_submissions`)."""
    folders = {c.folder for c, _ in group}
    files = ", ".join(shown(c.path) for c, _ in group)
    exercise = group[0][1].exercise
    if len(folders) > 1:
        raise LayoutError(
            f"{student} handed in {exercise} in {len(folders)} folders ({files}): if the folders inside are "
            f"students, give them (or their parent folder) instead; if all are {student}'s, pass --layout student "
            f"(or --layout students for a folder of students), and the latest counts"
        )
    if group[0][0].own_folder and folders == {"."}:
        raise LayoutError(
            f"{len(group)} files for {exercise} lie at the top of {student}'s folder ({files}): if each file is a "
            f"student's, pass --layout students; if they are {student}'s resubmissions, pass --layout student, and "
            f"the latest counts"
        )


def _walk(folder: Path, found: Found):
    """``(path, path relative to folder)`` of every regular file under ``folder``, in order; symbolic links are
    reported in ``found.skipped`` and not followed."""
    for parent, dirs, files in os.walk(folder):
        dirs.sort()
        for name in list(dirs):
            if os.path.islink(os.path.join(parent, name)):
                found.skipped.append(f"{shown(os.path.join(parent, name))}: a symbolic link (not followed)")
                dirs.remove(name)
        for name in sorted(files):
            path = Path(parent) / name
            if path.is_symlink():
                found.skipped.append(f"{shown(path)}: a symbolic link (not followed)")
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
    """The rows of one batch, one per (student, exercise), in the order of the students; ``questions`` holds each
    exercise's questions (the CSV has a column per question name, empty where a row's exercise has none)."""

    questions: dict[str, list[Question]]
    rows: list[GradeRow]

    def possible(self, exercise: str) -> float:
        return sum(q.points for q in self.questions.get(exercise, []))

    @property
    def columns(self) -> list[str]:
        names = dict.fromkeys(q.name for qs in self.questions.values() for q in qs)
        return sorted(names, key=_natural)

    def write(self, path: str | Path) -> None:
        """Write the gradebook CSV atomically: readers see the old file or the new one, never a partial one."""
        text = io.StringIO(newline="")
        writer = csv.writer(text)
        columns = self.columns
        writer.writerow(["student", "submission", "submitted", "graded_at", "exercise", *columns, "total", "possible",
                         "error"])  # fmt: skip
        for row in self.rows:
            own = {q.name for q in self.questions.get(row.exercise, [])}
            writer.writerow(
                [
                    cell(row.student),
                    cell(row.submission),
                    row.submitted,
                    row.graded_at,
                    cell(row.exercise),
                    *(f"{row.scores.get(name, 0.0):g}" if name in own else "" for name in columns),
                    f"{row.total:g}",
                    f"{self.possible(row.exercise):g}",
                    cell(row.error),
                ]
            )
        atomic_write(Path(path), text.getvalue().encode("utf-8", "backslashreplace"))

    def summary(self) -> str:
        """A few lines for the terminal: per exercise totals and per-question means, and every error."""
        lines = []
        for exercise, questions in self.questions.items():
            rows = [r for r in self.rows if r.exercise == exercise]
            n, possible = len(rows), self.possible(exercise)
            totals = sorted(r.total for r in rows)
            broken = sum(bool(r.error) for r in rows)
            lines.append(f"{exercise}: graded {n} submission{'s' * (n != 1)}, {broken} with errors")
            if n:
                full = sum(t >= possible for t in totals)
                lines.append(
                    f"  total: mean {sum(totals) / n:.2f}, median {totals[n // 2]:g}, "
                    f"out of {possible:g}; {full} with full marks"
                )
                lines.append(
                    "  mean per question: "
                    + ", ".join(
                        f"{q.name} {sum(r.scores.get(q.name, 0) for r in rows) / n:.2f}/{q.points:g}" for q in questions
                    )
                )
        unsorted = [r for r in self.rows if r.exercise not in self.questions]
        if unsorted:
            lines.append(f"not graded: {len(unsorted)} submission{'s' * (len(unsorted) != 1)} (see their errors)")
        broken = [r for r in self.rows if r.error]
        if broken:
            lines.append(f"errors ({len(broken)}):")
        lines += [
            f"  {plain(r.student)} ({plain(r.exercise) or 'no exercise'}, {plain(r.submission)}): {plain(r.error)}"
            for r in broken
        ]
        return "\n".join(" ".join(line.split("\n")) for line in lines)


def _natural(name: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def safe_name(student: str) -> str:
    """A folder name for ``student``'s feedback, different for different students: the name itself where it is
    a plain one (letters, digits, ``_ . @ -``), else its plain characters, ``~`` and a hash of the whole name
    (``~`` is not a plain character, so no plain name takes that form)."""
    plain_name = re.sub(r"[^A-Za-z0-9_.@-]+", "_", student).strip("._")[:80] or "student"
    if plain_name == student and not student.startswith("."):
        return plain_name
    return f"{plain_name}~{hashlib.sha256(student.encode('utf-8', 'surrogateescape')).hexdigest()[:16]}"
