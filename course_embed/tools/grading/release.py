"""A release for learners: the course without solutions or hidden tests.

The public repository holds ``exercises/source/`` (solutions, hidden tests) for self-learners. An instructor who
grades for credit hands learners a release instead: every file git tracks (or every file, outside a git checkout),
minus the instructor's material: :data:`LEFT_OUT`. Learners keep the student notebooks and the public checks
(``exercises/checks/``), so ``grader.check`` still works; the instructor grades with the full copy. The release's
README leaves out the passages marked ``<!-- instructors only -->`` in the repository's and says what the release is.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
from pathlib import Path

#: What an instructor keeps: solutions and hidden tests, and the tests and cases built from them.
LEFT_OUT = (
    "exercises/source/*",
    "tests/tools/grading_cases/*",
    "tests/tools/test_grading*.py",
    "tests/tools/test_exercises.py",
    ".git/*",
)
_SECRETS = ("# BEGIN SOLUTION", "hidden=True")
_INSTRUCTORS_ONLY = re.compile(r"<!-- instructors only -->.*?<!-- end instructors only -->\n", re.DOTALL)
RELEASE_NOTE = (
    "> **This copy is a release for learners.** It holds the chapters, the student notebooks in `exercises/` and "
    "their public checks (`grader.check`); the solutions and hidden tests stay with your instructor, who grades the "
    "zip that each notebook exports (`book/exercises.md` says how to hand it in).\n\n"
)


def release_readme(text: str) -> str:
    """The repository's README as the release's: the instructors' passages left out, the release note after the
    title."""
    title, rest = text.split("\n", 1)
    return f"{title}\n\n{RELEASE_NOTE}{_INSTRUCTORS_ONLY.sub('', rest).lstrip()}"


def _files(root: Path) -> list[str]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
        return [f for f in listed.decode().split("\0") if f and (root / f).is_file()]
    except (OSError, subprocess.CalledProcessError):
        return [str(p.relative_to(root)) for p in sorted(root.rglob("*")) if p.is_file()]


def make_release(root: str | Path, out: str | Path) -> list[str]:
    """Copy the course in ``root`` to the new folder ``out`` without :data:`LEFT_OUT`; returns the files copied.

    Raises ``FileExistsError`` if ``out`` exists, and ``ValueError`` (after removing ``out``) if a copied file
    still holds a solution or hidden-test marker.
    """
    root, out = Path(root).resolve(), Path(out).resolve()
    if out.exists():
        raise FileExistsError(f"{out} exists: give a new folder for the release")
    if out == root or root in out.parents:
        raise ValueError(f"make the release outside the repository ({root}), not in {out}")
    copied = [f for f in _files(root) if not any(fnmatch.fnmatch(f, pattern) for pattern in LEFT_OUT)]
    for name in copied:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, out / name)
    if "README.md" in copied:
        (out / "README.md").write_text(release_readme((root / "README.md").read_text()))
    leaks = [
        name
        for name in copied
        if name.startswith("exercises/") and any(s in (out / name).read_text(errors="replace") for s in _SECRETS)
    ]
    if leaks:
        shutil.rmtree(out)
        raise ValueError(f"the release would leak solutions or hidden tests in {leaks}; nothing was written")
    return copied
