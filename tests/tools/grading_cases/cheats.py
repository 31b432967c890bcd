"""The grading batch of exercise 03: each cheat of issue 15 and each kind of broken submission, one folder per student.

Every entry says what the submission must score (per question) and what its row's ``error`` must contain. The
cheats answer nothing honestly unless their entry says so, so each must score exactly its honest answers.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from . import NOT_READ, answer_cells, with_answers

#: A token in the command line of every process a cheat leaves behind, so a test can look for survivors in /proc.
SURVIVOR_TOKEN = "course-embed-cheat-survivor-7f3a"

#: The limits the batch is graded under (``course-embed grade`` options): the default memory limit (4 GiB), and
#: file size and disk limits small enough that the cases that hit them stay fast.
LIMIT_OPTIONS = ["--file-size", "16M", "--disk", "64M"]


@dataclass
class Case:
    """One submission of the batch: where it goes, what it must score (q1, q2, q3, q4; ``None`` where its row's
    question cells are empty, as for a file that names no exercise or cannot be read) and what its error says."""

    path: str
    scores: tuple[float | None, float | None, float | None, float | None]
    error: str = ""


def _cheats(root: Path, gradebook: Path) -> dict[str, tuple[dict[int, str], tuple[float, float, float, float]]]:
    """Answer cells (0 = q1) for each cheat, and what it honestly earns."""
    forger = (
        f"import time, pathlib\ntime.sleep(8)\n"
        f"pathlib.Path({str(gradebook)!r}).write_text('student,total\\nforged,9\\n')  # {SURVIVOR_TOKEN}"
    )
    return {
        # c01: exec the solution's answer cells, found next to course_embed (and at the repository's real path)
        "c01_read_solution": (
            {
                0: "import json, pathlib\n"
                f"for where in (pathlib.Path(ce.__file__).parents[1], pathlib.Path({str(root)!r})):\n"
                "    path = where / 'exercises/source/03_sinusoidal.ipynb'\n"
                "    if path.exists():\n"
                "        for cell in json.loads(path.read_text())['cells']:\n"
                "            if cell['cell_type'] == 'code' and 'def ' in ''.join(cell['source']):\n"
                "                exec(''.join(cell['source']), globals())\n"
                "        break"
            },
            (0, 0, 0, 0),
        ),
        # c04: make otter's test runner pass every case
        "c04_patch_otter": (
            {
                0: "from otter.test_files import exception_test\n"
                "from otter.test_files.abstract_test import TestCaseResult\n"
                "exception_test.ExceptionTestFile.run = lambda self, env: setattr(\n"
                "    self, 'test_case_results',\n"
                "    [TestCaseResult(test_case=tc, message='ok', passed=True) for tc in self.test_cases])\n"
                "sinusoidal = lambda *a: None"
            },
            (0, 0, 0, 0),
        ),
        # c09: rewrite every test file within reach so that each test returns at once
        "c09_rewrite_tests": (
            {
                0: "import pathlib, re\n"
                "for path in list(pathlib.Path('/').glob('work/**/*.py')) + "
                f"list(pathlib.Path({str(root)!r}).glob('exercises/**/*.py')):\n"
                "    try:\n"
                "        text = path.read_text()\n"
                "        path.write_text(re.sub(r'(def \\w+\\(.*\\):\\n)', r'\\1    return\\n', text))\n"
                "    except OSError:\n"
                "        pass"
            },
            (0, 0, 0, 0),
        ),
        # c05: recompile the reference's source under another file name
        "c05_reference_source": (
            {
                0: "import inspect, course_embed\nns = {}\n"
                "exec(compile(inspect.getsource(course_embed.sinusoidal), 'mine.py', 'exec'), ns)\n"
                "sinusoidal = ns['sinusoidal_table']\n"
                "rotation = ns['offset_rotation']"
            },
            (0, 0, 0, 0),
        ),
        # c06: replace the alias check, then call the reference
        "c06_patch_call_own": (
            {
                0: "import course_embed.tools.grading as g\n"
                "g.call_own = lambda n, f, *a, **k: f(*a, **k)\n"
                "sinusoidal = ce.sinusoidal_table"
            },
            (0, 0, 0, 0),
        ),
        # c10: switch off the profiler the alias check used, then call the reference
        "c10_setprofile": (
            {0: "import sys\ndef sinusoidal(*a):\n    sys.setprofile(None)\n    return ce.sinusoidal_table(*a)"},
            (0, 0, 0, 0),
        ),
        # c11: guess the measurement instead of measuring it (the value asked, 64 wide, for every width)
        "c11_guess_measurement": ({2: "def first_rise(d_model):\n    return 6"}, (0, 0, 0, 0)),
        # c02: make every comparison pass, with wrong answers
        "c02_patch_comparisons": (
            {
                0: "import math, torch\n"
                "torch.allclose = lambda *a, **k: True\n"
                "torch.equal = lambda *a, **k: True\n"
                "torch.testing.assert_close = lambda *a, **k: None\n"
                "math.isclose = lambda *a, **k: True\n"
                "sinusoidal = lambda length, d, base=1e4: torch.zeros(length, d)",
                1: "rotation = lambda k, d, base=1e4: torch.eye(d, dtype=torch.float64)",
            },
            (0, 0, 0, 0),
        ),
        # c08: tables precomputed with the reference when the cell runs, looked up when graded
        "c08_precomputed": (
            {
                0: "_T = {d: ce.sinusoidal_table(20000, d) for d in (2, 4, 6, 8, 10, 16, 64)}\n"
                "def sinusoidal(length, d_model, base=10000.0):\n"
                "    return _T[d_model][:length]"
            },
            (0, 0, 0, 0),
        ),
        # c07: a detached process that outlives the grader and rewrites the gradebook; q1 answered honestly
        "c07_forge_gradebook": (
            {
                1: "import subprocess, sys\n"
                f"subprocess.Popen([sys.executable, '-c', {forger!r}], start_new_session=True,\n"
                "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
                "rotation = None"
            },
            (4, 0, 0, 0),
        ),
        # correct answers that leave children behind: Popen, setsid nohup, a double fork
        "c12_background_children": (
            {
                2: "import os, subprocess, sys\n"
                f"subprocess.Popen(['sleep', '600', '{SURVIVOR_TOKEN}'])\n"
                f"os.system('setsid nohup sleep 600 {SURVIVOR_TOKEN} >/dev/null 2>&1 &')\n"
                "if os.fork() == 0:\n"
                "    if os.fork() == 0:\n"
                f"        os.execvp('sleep', ['sleep', '600', '{SURVIVOR_TOKEN}'])\n"
                "    os._exit(0)\n"
            },
            (4, 3, 2, 3),
        ),
    }


def build_batch(
    folder: Path, student_nb, solution: list[str], wrong_exercise_nb, root: Path, gradebook: Path
) -> list[Case]:
    """Write the batch into ``folder`` (one folder per student, some nested deeper); return what each must score."""
    good = with_answers(student_nb, dict(enumerate(solution)))
    q1, q2, q3, q4 = answer_cells(good)
    cases: list[Case] = []

    def put(rel: str, nb, scores, error=""):
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, path)
        cases.append(Case(rel, scores, error))

    def variant(edit):
        nb = nbformat.reads(nbformat.writes(good), as_version=4)
        edit(nb)
        return nb

    put("alice/03_sinusoidal.ipynb", good, (4, 3, 2, 3))
    put("bob/03_sinusoidal.ipynb", student_nb, (0, 0, 0, 0))
    put("groups/week3/carol/03_sinusoidal.ipynb", good, (4, 3, 2, 3))  # nested deeper: carol is still the student
    for name, (answers, honest) in _cheats(root, gradebook).items():
        if name == "c12_background_children":  # every answer right, and children started from q3's cell
            answers = {**dict(enumerate(solution)), 2: solution[2] + "\n" + answers[2]}
        if name == "c07_forge_gradebook":  # q1 right
            answers = {0: solution[0], **answers}
        put(f"{name}/03_sinusoidal.ipynb", with_answers(student_nb, answers), honest)
    put(
        "d01_syntax/03_sinusoidal.ipynb",
        variant(lambda nb: setattr(nb.cells[q2], "source", "def rotation(k, d_model:\n    pass")),
        (4, 0, 2, 3),
        "q2's answer cell: SyntaxError",
    )
    put(
        "d02_exception/03_sinusoidal.ipynb",
        variant(lambda nb: setattr(nb.cells[q2], "source", "raise RuntimeError('stuck')\n" + nb.cells[q2].source)),
        (4, 0, 2, 3),
        "q2's answer cell: RuntimeError: stuck",
    )
    put(
        "d03_sysexit/03_sinusoidal.ipynb",
        variant(lambda nb: nb.cells.insert(q2, new_code_cell("import sys\nsys.exit(3)"))),
        (4, 3, 2, 3),
        "SystemExit",
    )
    put(
        "d04_os_exit_in_q3/03_sinusoidal.ipynb",
        variant(lambda nb: setattr(nb.cells[q3], "source", "import os\nos._exit(1)")),
        (4, 3, 0, 0),  # the process ends in q3's cell: q4's (right) answer never runs
        "the notebook's process died",
    )
    # resource limits: each stops the notebook in q3's cell, which would be right without the limit; q4's answer,
    # right too, comes after it and never runs
    put(
        "e01_memory_limit/03_sinusoidal.ipynb",
        variant(  # 8 GiB of address space, not touched: without a limit this succeeds at no cost
            lambda nb: setattr(
                nb.cells[q3], "source", "huge = torch.empty(8 * 2**30, dtype=torch.uint8)\n" + solution[2]
            )
        ),
        (4, 3, 0, 0),
        "stopped at the sandbox's memory limit (4 GiB of address space per process); to allow more, grade again "
        "with course-embed grade --memory 8G",
    )
    put(
        "e02_file_size_limit/03_sinusoidal.ipynb",
        variant(  # 48 MiB in one file, written 1 MiB at a time (the file size limit is 16 MiB, the folder 64 MiB)
            lambda nb: setattr(
                nb.cells[q3],
                "source",
                "with open('big.bin', 'wb') as f:\n    for _ in range(48):\n        f.write(bytes(2**20))\n"
                + solution[2],
            )
        ),
        (4, 3, 0, 0),
        "stopped at the sandbox's file size limit (16 MiB per file); to allow more, grade again with "
        "course-embed grade --file-size 32M",
    )
    put(
        "e03_disk_limit/03_sinusoidal.ipynb",
        variant(  # 60 MiB in the output folder, 12 MiB printed (both on the host's disk; files under 16 MiB), a wait
            lambda nb: setattr(
                nb.cells[q3],
                "source",
                "import time\nfor i in range(5):\n    with open(f'out/fill{i}.bin', 'wb') as f:\n"
                "        f.write(bytes(12 * 2**20))\nfor _ in range(12):\n    print('x' * 2**20)\n"
                "time.sleep(30)\n" + solution[2],
            )
        ),
        (4, 3, 0, 0),
        "stopped at the sandbox's disk limit (64 MiB per writable folder); to allow more, grade again with "
        "course-embed grade --disk 128M",
    )
    put("d05_deleted/03_sinusoidal.ipynb", variant(lambda nb: nb.cells.pop(q2)), (4, 0, 2, 3), "")
    put(
        "d06_renamed/03_sinusoidal.ipynb",
        variant(lambda nb: setattr(nb.cells[q2], "source", nb.cells[q2].source.replace("def rotation", "def rot"))),
        (4, 0, 2, 3),
    )
    put("d07_other_exercise/03_sinusoidal.ipynb", wrong_exercise_nb, (0, 0, 0, 0))  # graded for its own exercise
    put("d08_plain/notebook.ipynb", new_notebook(cells=[new_code_cell("x = 1")]), NOT_READ, "not an exercise notebook")
    (folder / "d09_invalid").mkdir()
    (folder / "d09_invalid" / "03_sinusoidal.ipynb").write_text(nbformat.writes(good)[:500])
    cases.append(Case("d09_invalid/03_sinusoidal.ipynb", NOT_READ, "not a notebook: invalid JSON"))
    (folder / "d10_bad_zip").mkdir()
    (folder / "d10_bad_zip" / "03_sinusoidal.zip").write_text("not a zip")
    cases.append(Case("d10_bad_zip/03_sinusoidal.zip", NOT_READ, "cannot read the file"))
    # a resubmission: dave's older notebook is untouched, his later export (grader.export's zip) is right
    put("dave/03_sinusoidal.ipynb", student_nb, (0, 0, 0, 0))
    cases.pop()
    os.utime(folder / "dave" / "03_sinusoidal.ipynb", (1_700_000_000, 1_700_000_000))  # handed in earlier
    with zipfile.ZipFile(folder / "dave" / "03_sinusoidal_2099_01_01T00_00_00_000000.zip", "w") as zf:
        zf.writestr("03_sinusoidal.ipynb", nbformat.writes(good))
    cases.append(Case("dave/03_sinusoidal_2099_01_01T00_00_00_000000.zip", (4, 3, 2, 3)))
    (folder / "notes.txt").write_text("not a submission")
    return cases


def loop_notebook(student_nb, solution: list[str]):
    """Correct q1, q2 and q4, and an endless (sleeping) loop in q3's cell: graded by its time limit, which stops it
    before q4's cell runs."""
    return with_answers(student_nb, {**dict(enumerate(solution)), 2: "import time\nwhile True:\n    time.sleep(0.1)"})
