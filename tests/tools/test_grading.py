"""Grading can be trusted: each submission runs in a bubblewrap sandbox and only gathers its answers' outputs; the
grader checks them outside. Solutions score full marks, untouched notebooks zero, answers that reuse course_embed
nothing, each cheat of issue 15 only what it honestly answered, every broken submission gets its row, and one
stopped at a resource limit keeps the questions it checked before, with a note naming the limit.

The helpers are tested without a sandbox; the round trips share two batches (module-scoped fixtures) so that the
sandboxes start once: one per exercise (solution, untouched, partly right) and the cheating batch of exercise 03.
"""

import _thread
import csv
import json
import os
import pickle
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_notebook

from course_embed.tools.cli import main
from course_embed.tools.grading import batch, compare, confine, notebook, probe, sandbox, submission
from course_embed.tools.grading.compare import Question, TestResult, load_suite, read_output, strip_checks
from course_embed.tools.grading.feedback import results_json
from course_embed.tools.grading.gradebook import Gradebook, GradeRow, find_submissions, safe_name
from course_embed.tools.grading.limits import Limits, parse_size
from course_embed.tools.grading.release import make_release
from course_embed.tools.grading.restore import restore
from course_embed.tools.grading.submission import plan, read_submission

from .grading_cases import ALIASES, NAMES, NOT_READ, ROOT, exercise_notebook, solution_answers, with_answers
from .grading_cases.cheats import LIMIT_OPTIONS, SURVIVOR_TOKEN, build_batch, loop_notebook
from .grading_cases.hostile import build_mixed_batch

SPEC = """
import torch
from course_embed.tools.grading.probe import run, test

@test("q1", points=2)
def doubles(f):
    got = yield [run(f, torch.tensor([1.0, 2.0])), run(f, "bad")]
    out = got[0].tensor("f(x)", shape=(2,), dtype=torch.float32)
    assert torch.equal(out, torch.tensor([2.0, 4.0])), "f must double SECRET_EXPECTATION"
    got[1].raises("f('bad')", TypeError)
"""


def _spec(tmp_path):
    (tmp_path / "spec.py").write_text(SPEC)
    return probe.tests_of(probe.load_module(tmp_path / "spec.py", "spec"))[0]


def _double(x):
    if not isinstance(x, torch.Tensor):
        raise TypeError("x must be a tensor")
    return x * 2


# --- the test format: gather inside, check outside ---------------------------------------------------------------


def test_a_test_gathers_data_then_checks_it_outside(tmp_path):
    spec = _spec(tmp_path)
    assert (spec.question, spec.points, spec.answers) == ("q1", 2.0, ("f",))
    gathered = probe.gather(spec, {"f": _double})
    reloaded = torch.load(_save(tmp_path, gathered), weights_only=True)  # what crosses is plain data
    assert probe.check(spec, reloaded) == (True, "")
    assert probe.check(spec, probe.gather(spec, {"f": lambda x: x})) == (False, "f must double SECRET_EXPECTATION")
    passed, message = probe.check(spec, probe.gather(spec, {"f": lambda x: x.numpy() * 2}))
    assert not passed and "must return a torch tensor, got ndarray" in message
    passed, message = probe.check(spec, probe.gather(spec, {}))
    assert not passed and "`f` is not defined" in message
    passed, message = probe.check(spec, probe.gather(spec, {"f": ...}))
    assert not passed and "`f` is not defined" in message


def test_checks_run_one_at_a_time_each_with_its_own_generator_state():
    """A batch grades in threads; a check that seeds torch's generator to rebuild its reference must not be
    reseeded by another check halfway through, and no check may change the generator for the code around it."""
    seeded, reseeded = threading.Event(), threading.Event()

    @probe.test("q1", points=1)
    def rebuilds_a_seeded_reference(f):
        yield probe.run(f)
        torch.manual_seed(0)
        seeded.set()
        reseeded.wait(timeout=1.0)  # without one-at-a-time checks, the other check reseeds here
        expected = torch.rand(4, generator=torch.Generator().manual_seed(0))
        assert torch.equal(torch.rand(4), expected), "reseeded by another check"

    @probe.test("q2", points=1)
    def reseeds(f):
        yield probe.run(f)
        seeded.wait(timeout=1.0)
        torch.manual_seed(1)
        torch.rand(100)
        reseeded.set()

    state = torch.get_rng_state()
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(probe.check, rebuilds_a_seeded_reference, probe.gather(rebuilds_a_seeded_reference, {}))
        assert seeded.wait(timeout=10.0)
        assert probe.check(reseeds, probe.gather(reseeds, {})) == (True, "")
        assert first.result() == (True, "")
    assert torch.equal(torch.get_rng_state(), state)


def _save(tmp_path, data):
    torch.save(data, tmp_path / "out.pt")
    return tmp_path / "out.pt"


def test_only_the_gathering_half_enters_the_sandbox(tmp_path):
    stripped = strip_checks(SPEC)
    assert "SECRET_EXPECTATION" not in stripped and "raises" not in stripped and "return [run(f" in stripped
    module = tmp_path / "stripped.py"
    module.write_text(stripped)
    spec = probe.tests_of(probe.load_module(module, "stripped"))[0]
    assert probe.check(_spec(tmp_path), probe.gather(spec, {"f": _double})) == (True, "")
    with pytest.raises(ValueError, match="import course_embed"):
        strip_checks("import course_embed\n" + SPEC)
    with pytest.raises(ValueError, match="one yield at the top level"):
        strip_checks(SPEC.replace("    got = yield [", "    for _ in (1,):\n        got = yield ["))


def test_outputs_are_read_as_data_only(tmp_path):
    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    forged = tmp_path / "forged.pt"
    forged.write_bytes(pickle.dumps({"x": Payload()}))
    assert "unreadable outputs" in read_output(forged).why
    assert not (tmp_path / "pwned").exists()
    big = tmp_path / "big.pt"
    with open(big, "wb") as f:
        f.truncate(compare.MAX_OUTPUT_BYTES + 1)
    assert "larger than" in read_output(big).why
    assert read_output(tmp_path / "missing.pt") is None


def test_every_exercise_has_public_and_hidden_tests_worth_its_points(built_exercises):
    for name in NAMES:
        suite = load_suite(ROOT / "exercises", name)
        student = nbformat.read(built_exercises[name].student, as_version=4)
        text = "".join(c.source for c in student.cells if c.cell_type == "markdown")
        for q in suite.questions:
            assert f"**Question {q.name[1:]} ({q.points:g} points)" in text, (name, q)
            kinds = {t.hidden for t in suite.tests if t.question == q.name}
            assert kinds == {True, False}, f"{name} {q.name} needs public and hidden tests"
        assert 2 <= len(suite.questions) <= 6


def test_grader_check_runs_the_public_tests_in_the_kernel_and_warns_about_the_reference(built_exercises):
    ns = {"torch": torch}
    solution = solution_answers(built_exercises["03_sinusoidal"])
    exec("import math\nimport course_embed as ce\n" + "\n".join(solution[:2]), ns)
    probe.check_public("03_sinusoidal", "q1", sinusoidal=ns["sinusoidal"])
    probe.check_public("03_sinusoidal", "q2", rotation=ns["rotation"])
    import course_embed as ce

    with pytest.raises(AssertionError, match="calls course_embed's sinusoidal.sinusoidal_table"):
        probe.check_public("03_sinusoidal", "q1", sinusoidal=lambda *a: ce.sinusoidal_table(*a))
    with pytest.raises(AssertionError, match="odd width|ValueError|returned"):
        probe.check_public("03_sinusoidal", "q1", sinusoidal=lambda n, d, b=1e4: ns["sinusoidal"](n, d + d % 2, b))


# --- submissions, students, gradebook, feedback ------------------------------------------------------------------


def test_plan_runs_learner_cells_and_checkpoints_at_each_check():
    nb = new_notebook(
        cells=[
            new_code_cell("# Initialize Otter\nimport otter\ngrader = otter.Notebook('x.ipynb')"),
            new_code_cell("def f():\n    return 1", metadata={"tags": ["otter_answer_cell"]}),
            new_code_cell('grader.check("q1")'),
            new_code_cell("x = f()"),
            new_code_cell("grader.check_all()"),
        ]
    )
    steps = plan(json.loads(nbformat.writes(nb)))
    assert steps == [
        {"source": "def f():\n    return 1", "label": "q1's answer cell"},
        {"checkpoint": "q1"},
        {"source": "x = f()", "label": "the cell `x = f()`"},
    ]


def test_read_submission_says_what_is_wrong(tmp_path):
    cases = {
        "truncated.ipynb": b'{"cells": [',
        "binary.ipynb": b"\xff\xfe\x00",
        "list.ipynb": b"[1, 2]",
        "notes.zip": b"not a zip",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    assert read_submission(tmp_path / "truncated.ipynb")[1].startswith("not a notebook: invalid JSON")
    assert "UTF-8" in read_submission(tmp_path / "binary.ipynb")[1]
    assert "nbformat 4" in read_submission(tmp_path / "list.ipynb")[1]
    assert read_submission(tmp_path / "notes.zip")[1].startswith("cannot read the file")
    with zipfile.ZipFile(tmp_path / "two.zip", "w") as zf:
        zf.writestr("a.ipynb", nbformat.writes(new_notebook()))
        zf.writestr("b.ipynb", nbformat.writes(new_notebook()))
    assert "2 notebooks" in read_submission(tmp_path / "two.zip")[1]


def test_submissions_are_found_per_student_at_any_depth_and_the_latest_wins(tmp_path):
    files = [
        "alice/03.ipynb",
        "groups/week3/bob/03.ipynb",
        "top.ipynb",
        "carol/03_sinusoidal.ipynb",
        "carol/03_sinusoidal_2099_01_01T00_00_00_000000.zip",
        "notes.txt",
        "alice/.ipynb_checkpoints/03.ipynb",
    ]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".zip"):
            with zipfile.ZipFile(tmp_path / name, "w") as zf:
                zf.writestr("03_sinusoidal.ipynb", exercise_notebook("03_sinusoidal"))
        else:
            (tmp_path / name).write_text(exercise_notebook("03_sinusoidal"))
    os.utime(tmp_path / "carol/03_sinusoidal.ipynb", (1_700_000_000, 1_700_000_000))  # handed in before the zip
    found = find_submissions([tmp_path], layout="students")
    assert {s.student: str(s.path.relative_to(tmp_path)) for s in found.submissions} == {
        "alice": "alice/03.ipynb",
        "groups": "groups/week3/bob/03.ipynb",  # a folder inside a student's folder is still theirs
        "top.ipynb": "top.ipynb",
        "carol": "carol/03_sinusoidal_2099_01_01T00_00_00_000000.zip",
    }
    skipped = "\n".join(found.skipped)
    assert "notes.txt: not a notebook" in skipped and ".ipynb_checkpoints" in skipped
    assert "carol/03_sinusoidal.ipynb: carol handed in a later file" in skipped


def test_gradebook_is_written_atomically_and_readable_by_others(tmp_path, monkeypatch):
    import importlib

    assign = importlib.import_module("course_embed.tools.grading.assign")
    book = Gradebook(
        {"01_x": [Question("q1", 2.0, ("f",)), Question("q2", 1.5, ("g",))]},
        [
            GradeRow("ann", "a.ipynb", "01_x", {"q1": 2.0, "q2": 0.5}, "", "2026-01-01T00:00:00Z", "t1"),
            GradeRow("ben", "b.ipynb", "01_x", {"q1": 0.0, "q2": 0.0}, 'q1: "quoted"'),
        ],
    )
    out = tmp_path / "gradebook.csv"
    book.write(out)
    rows = list(csv.reader(out.open()))
    assert rows[0] == [
        "student",
        "submission",
        "submitted",
        "graded_at",
        "exercise",
        "q1",
        "q2",
        "total",
        "possible",
        "error",
    ]
    assert rows[1] == ["ann", "a.ipynb", "2026-01-01T00:00:00Z", "t1", "01_x", "2", "0.5", "2.5", "3.5", ""]
    assert rows[2][-1] == 'q1: "quoted"' and oct(out.stat().st_mode & 0o777) == "0o644"
    before = out.read_bytes()
    monkeypatch.setattr(assign.os, "replace", lambda src, dst: (_ for _ in ()).throw(OSError("disk full")))
    book.rows.pop()
    with pytest.raises(OSError):
        book.write(out)
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["gradebook.csv"]


def test_results_json_follows_gradescope():
    results = [TestResult("t1", "q1", 1.0, 1.0, "", False), TestResult("t2", "q1", 0.0, 2.0, "wrong", True)]
    data = results_json(results, "q3's answer cell: RuntimeError: x", 3.21)
    assert data["score"] == 1.0 and data["execution_time"] == 3.2 and "RuntimeError" in data["output"]
    assert data["tests"] == [
        {"name": "q1 t1", "score": 1.0, "max_score": 1.0, "output": "passed", "visibility": "visible",
         "output_format": "text"},
        {"name": "q1 t2", "score": 0.0, "max_score": 2.0, "output": "wrong", "visibility": "after_published",
         "output_format": "text"},
    ]  # fmt: skip
    assert data["output_format"] == "text"


def _interrupting_batch(tmp_path, monkeypatch, interrupt):
    """Twelve submissions whose second one runs a sleeper registered as its sandbox and calls ``interrupt`` while
    it runs; returns the paths, the names started and the sleepers."""
    started, sleepers = [], []

    def fake_grade(submission, suite, feedback, timeout, running, limits):
        path, student = submission.path, submission.student
        started.append(path.name)
        if path.name == "s0.ipynb":
            return GradeRow(student, str(path), suite.exercise, {q.name: 1.0 for q in suite.questions})
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        sleepers.append(sleeper)
        with running.lock:
            running.procs.add(sleeper)
        threading.Timer(0.5, interrupt).start()
        sleeper.wait()
        return GradeRow(student, str(path), suite.exercise, {})

    monkeypatch.setattr(batch, "grade_submission", fake_grade)
    monkeypatch.setattr(batch, "require_bwrap", lambda: "ok")
    paths = []
    for i in range(12):
        nbformat.write(new_notebook(), tmp_path / f"s{i}.ipynb")
        paths.append(tmp_path / f"s{i}.ipynb")
    return paths, started, sleepers


def test_ctrl_c_stops_at_once_keeps_finished_rows_and_kills_running_sandboxes(tmp_path, monkeypatch):
    # Ctrl-C as a terminal delivers it, whatever SIGINT's disposition this test process inherited (a background
    # job of a script starts with SIGINT ignored, and then interrupt_main would do nothing)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        paths, started, sleepers = _interrupting_batch(tmp_path, monkeypatch, _thread.interrupt_main)
        start = time.monotonic()
        with pytest.raises(batch.Interrupted, match="interrupted: 1 of 12"):
            batch.grade_batch(paths, tmp_path / "gb.csv", exercise="03_sinusoidal", root=ROOT / "exercises", jobs=1)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - start < 20
    assert all(s.wait(timeout=10) is not None for s in sleepers)  # killed, not left running
    assert len(started) <= 3  # the queue was cancelled
    rows = list(csv.DictReader((tmp_path / "gb.csv").open()))
    assert [r["student"] for r in rows] == ["s0"]


def test_sigterm_stops_the_command_like_ctrl_c_also_with_sigint_ignored(tmp_path, monkeypatch, capsys):
    """Started with SIGINT ignored (``cmd &`` in a script), Ctrl-C cannot reach the command; ``kill`` (SIGTERM)
    stops it as Ctrl-C does: sandboxes killed, finished rows kept, exit status 143."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        paths, _, sleepers = _interrupting_batch(tmp_path, monkeypatch, lambda: os.kill(os.getpid(), signal.SIGTERM))
        code = main(["grade", *map(str, paths), "--out", str(tmp_path / "gb.csv"), "--exercise", "03_sinusoidal",
                     "--root", str(ROOT / "exercises"), "--jobs", "1"])  # fmt: skip
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the command put the default back
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == 143 and "interrupted: 1 of 12" in capsys.readouterr().err
    assert all(s.wait(timeout=10) is not None for s in sleepers)
    assert [r["student"] for r in csv.DictReader((tmp_path / "gb.csv").open())] == ["s0"]


def test_an_empty_batch_exits_non_zero_with_an_empty_gradebook(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "notes.txt").write_text("x")
    code = main(
        [
            "grade",
            str(tmp_path / "in"),
            "--out",
            str(tmp_path / "gb.csv"),
            "--exercise",
            "03_sinusoidal",
            "--root",
            str(ROOT / "exercises"),
        ]
    )
    assert code == 1
    assert list(csv.reader((tmp_path / "gb.csv").open()))[1:] == []
    err = capsys.readouterr().err
    assert "notes.txt: not a notebook" in err and "no submissions found" in err


def test_missing_bubblewrap_is_a_clear_error(monkeypatch):
    sandbox.require_bwrap.cache_clear()
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    try:
        with pytest.raises(sandbox.SandboxUnavailable, match="apt-get install bubblewrap"):
            sandbox.require_bwrap()
    finally:
        sandbox.require_bwrap.cache_clear()


def test_limits_are_options_with_clear_errors_and_notes(capsys):
    assert [parse_size(t) for t in ("4G", "512M", "100K", "1.5G", "2048", "4GiB")] == [
        4 * 2**30,
        512 * 2**20,
        100 * 2**10,
        3 * 2**29,
        2048,
        4 * 2**30,
    ]
    with pytest.raises(ValueError, match=r"--memory must be a size such as 4G.*got '4X'"):
        parse_size("4X", "--memory")
    with pytest.raises(ValueError, match=r"memory limit \(--memory\) must be at least 1G"):
        Limits(memory=512 * 2**20)
    assert Limits().note("processes") == (
        "stopped at the sandbox's process limit (64 processes and threads); to allow more, grade again with "
        "course-embed grade --processes 128"
    )
    assert (
        Limits(disk=3 * 2**29)
        .note("disk")
        .endswith(
            "disk limit (1.5 GiB per writable folder); to allow more, grade again with course-embed grade --disk 3G"
        )
    )
    with pytest.raises(SystemExit):
        main(["grade", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for option, default in (
        ("--memory", "4G"),
        ("--file-size", "256M"),
        ("--disk", "512M"),
        ("--processes", "64"),
        ("--cpu-time", "600"),
    ):
        assert re.search(rf"{option} \S+ .*?default {default}\b", shown), option
    assert "name its exercises/ folder (not the course's root) with --root" in shown
    assert main(["grade", "x.ipynb", "--memory", "100M"]) == 2
    assert "must be at least 1G" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root, to run as nobody too")
def test_the_process_limit_holds_for_an_ordinary_user_not_for_root():
    """What book/instructors.md says: the kernel exempts user id 0 from RLIMIT_NPROC, capabilities or not."""
    forks = (
        "import os, resource, time\nresource.setrlimit(resource.RLIMIT_NPROC, (8, 8))\nn = 0\ntry:\n"
        "    for _ in range(20):\n        if os.fork() == 0:\n            time.sleep(2)\n            os._exit(0)\n"
        "        n += 1\nexcept BlockingIOError:\n    pass\nprint(n)"
    )
    box = [
        "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/usr",
        "/usr",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
    ]
    box += [
        arg
        for top in ("bin", "lib", "lib64")
        if Path(f"/{top}").is_symlink()
        for arg in ("--symlink", os.readlink(f"/{top}"), f"/{top}")
    ]
    python = ["--", "/usr/bin/python3", "-I", "-c", forks]
    nobody = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    counts = {
        who: int(subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout)
        for who, cmd in {
            "root": box + python,
            "root without capabilities": box + ["--cap-drop", "ALL"] + python,
            "nobody": nobody + box + python,
        }.items()
    }
    assert counts["root"] == counts["root without capabilities"] == 20
    assert counts["nobody"] < 8


def test_release_leaves_out_solutions_and_hidden_tests(tmp_path):
    files = make_release(ROOT, tmp_path / "release")
    assert "exercises/03_sinusoidal.ipynb" in files and "exercises/checks/03_sinusoidal.py" in files
    assert not any(f.startswith("exercises/source/") for f in files)
    for path in (tmp_path / "release" / "exercises").rglob("*"):
        if path.is_file():
            assert "# BEGIN SOLUTION" not in path.read_text() and "hidden=True" not in path.read_text()
    readme = (tmp_path / "release" / "README.md").read_text()
    assert "release for learners" in readme and readme.startswith((ROOT / "README.md").read_text().split("\n")[0])
    assert "exercises/source" not in readme and "instructors only" not in readme and "bwrap" not in readme
    assert "<!-- test command" in readme  # what a learner runs is still there
    with pytest.raises(FileExistsError):
        make_release(ROOT, tmp_path / "release")


# --- round trips through the sandbox -------------------------------------------------------------------------------


def _grade_dirs(parent: Path) -> set[str]:
    return {p.name for p in parent.glob("course-embed-grade-*")}


@pytest.fixture(scope="module")
def graded(built_exercises, tmp_path_factory):
    """Per exercise, the rows of three notebooks: the solution; the untouched student notebook; and a partly right
    one, whose answers in ALIASES reuse course_embed's implementation. Two exercises are graded at a time."""

    def grade(name):
        built = built_exercises[name]
        folder = tmp_path_factory.mktemp(name)
        student = nbformat.read(built.student, as_version=4)
        answers = solution_answers(built)
        notebooks = {
            "solution": with_answers(student, dict(enumerate(answers))),
            "untouched": student,
            "partial": with_answers(student, {k: ALIASES[name].get(k, a) for k, a in enumerate(answers)}),
        }
        for kind, nb in notebooks.items():
            nbformat.write(nb, folder / f"{kind}.ipynb")
        book = batch.grade_batch(
            [folder / f"{k}.ipynb" for k in notebooks],
            folder / "gradebook.csv",
            exercise=name,
            root=ROOT / "exercises",
            jobs=1,
            timeout=240,
        )
        return {row.student: row for row in book.rows}, book

    with ThreadPoolExecutor(2) as pool:
        return dict(zip(NAMES, pool.map(grade, NAMES), strict=False))


@pytest.mark.parametrize("name", NAMES)
def test_solution_scores_full_marks(graded, name):
    rows, book = graded[name]
    assert rows["solution"].error == ""
    assert rows["solution"].scores == {q.name: q.points for q in book.questions[name]}


@pytest.mark.parametrize("name", NAMES)
def test_untouched_student_notebook_scores_zero(graded, name):
    rows, book = graded[name]
    assert rows["untouched"].scores == {q.name: 0.0 for q in book.questions[name]}


@pytest.mark.parametrize("name", NAMES)
def test_reference_aliases_get_nothing_and_the_rest_full_credit(graded, name):
    rows, book = graded[name]
    for k, q in enumerate(book.questions[name]):
        assert rows["partial"].scores[q.name] == (0 if k in ALIASES[name] else q.points), (q.name, rows["partial"])


def test_the_hidden_inputs_are_fixed_per_exercise_and_grading_key(monkeypatch):
    monkeypatch.delenv(submission.GRADING_KEY, raising=False)
    seeds = {name: submission.grading_seed(name) for name in NAMES}
    assert seeds == {name: submission.grading_seed(name) for name in NAMES}, "a seed must not change between runs"
    assert len(set(seeds.values())) == len(NAMES) and all(0 <= s < 2**62 for s in seeds.values())
    monkeypatch.setenv(submission.GRADING_KEY, "an instructor's own key")
    assert all(submission.grading_seed(name) != seeds[name] for name in NAMES), "the key must change every seed"
    assert submission.grading_seed(NAMES[0]) == submission.grading_seed(NAMES[0], "an instructor's own key")


def test_the_same_wrong_notebook_gets_the_same_grade_every_time(built_exercises, tmp_path):
    """A sinusoidal that ignores its base, graded three times: the same scores each time, and the base is caught
    (a hidden test always tries a base other than 10000)."""
    name = "03_sinusoidal"
    built = built_exercises[name]
    answers = solution_answers(built)
    assert "base ** (" in answers[0]
    answers[0] = answers[0].replace("base ** (", "10000.0 ** (")
    student = nbformat.read(built.student, as_version=4)
    nbformat.write(with_answers(student, dict(enumerate(answers))), tmp_path / "a.ipynb")
    suite = load_suite(ROOT / "exercises", name)
    grades = []
    for _ in range(3):
        graded_once = submission.grade_file(tmp_path / "a.ipynb", suite, timeout=240)
        assert graded_once.error == ""
        grades.append([(r.name, r.score, r.output) for r in graded_once.results])
    assert grades[0] == grades[1] == grades[2], grades
    lost = {n: out for n, score, out in grades[0] if n.startswith("sinusoidal") and score == 0}
    assert "sinusoidal_matches_reference" in lost and "use the base argument" in lost["sinusoidal_matches_reference"]


@pytest.fixture(scope="module")
def cheat_batch(built_exercises, tmp_path_factory):
    """The batch of exercise 03 (see grading_cases/cheats.py) graded through the CLI under the limits of
    LIMIT_OPTIONS, and, at the same time, a notebook that loops in q3 (q4 right after it), graded with a short time
    limit."""
    folder = tmp_path_factory.mktemp("cheats")
    out = folder / "gradebook.csv"
    student = nbformat.read(built_exercises["03_sinusoidal"].student, as_version=4)
    solution = solution_answers(built_exercises["03_sinusoidal"])
    wrong = nbformat.read(built_exercises["05_rope_alibi"].student, as_version=4)
    cases = build_batch(folder / "batch", student, solution, wrong, ROOT, out)
    (folder / "loop").mkdir()
    nbformat.write(loop_notebook(student, solution), folder / "loop" / "03_sinusoidal.ipynb")
    # the batch's sandboxes get their work folders in a temporary directory of their own, so that what other
    # processes grade at the same time (another xdist worker, another checkout) cannot look like a leftover
    scratch = tmp_path_factory.mktemp("scratch")
    with pytest.MonkeyPatch.context() as mp, ThreadPoolExecutor(1) as pool:
        mp.setattr(tempfile, "tempdir", str(scratch))
        looping = pool.submit(
            batch.grade_batch,
            [folder / "loop"],
            folder / "loop.csv",
            exercise="03_sinusoidal",
            root=ROOT / "exercises",
            jobs=1,
            timeout=60,
        )
        code = main(
            ["grade", str(folder / "batch"), "--out", str(out), "--root", str(ROOT / "exercises"), "--timeout", "240"]
            + LIMIT_OPTIONS
        )
        loop_book = looping.result()
    return {
        "code": code,
        "cases": cases,
        "out": out,
        "folder": folder,
        "leftovers": _grade_dirs(scratch),
        "ended": time.monotonic(),
        "bytes": out.read_bytes(),
        "loop": loop_book.rows[0],
    }


def _assert_scores(row: dict, case) -> None:
    """``row`` (a gradebook line) holds ``case.scores`` for q1, q2, q3, q4 (``None``: an empty cell) and their
    total."""
    assert tuple(float(row[q]) if row[q] else None for q in ("q1", "q2", "q3", "q4")) == case.scores, (case.path, row)
    assert float(row["total"]) == sum(s or 0 for s in case.scores), (case.path, row)


def test_every_cheat_and_broken_submission_scores_only_what_it_answered(cheat_batch):
    assert cheat_batch["code"] == 0
    rows = {r["submission"]: r for r in csv.DictReader(cheat_batch["out"].open())}
    batch_dir = cheat_batch["folder"] / "batch"
    for case in cheat_batch["cases"]:
        row = rows[str(batch_dir / case.path)]
        _assert_scores(row, case)
        assert case.error in row["error"], (case.path, row["error"])
        if case.error == "" and case.scores == (4, 3, 2, 3):
            assert row["error"] == "", (case.path, row["error"])


def test_a_folder_per_student_batch_is_graded_whole(cheat_batch):
    rows = list(csv.DictReader(cheat_batch["out"].open()))
    students = [r["student"] for r in rows]
    assert len(rows) == len(cheat_batch["cases"]) and len(set(students)) == len(students)
    assert {"alice", "bob", "groups", "dave"} <= set(students)  # the folder given holds one folder per student
    dave = next(r for r in rows if r["student"] == "dave")
    assert dave["submission"].endswith(".zip") and dave["total"] == "12"  # his later submission won
    assert all(r["submitted"] and r["graded_at"] for r in rows)
    feedback = cheat_batch["folder"] / "gradebook-feedback"
    alice = json.loads((feedback / "alice" / "03_sinusoidal" / "results.json").read_text())
    assert alice["score"] == 12 and all(t["score"] == t["max_score"] for t in alice["tests"])
    bob = (feedback / "bob" / "03_sinusoidal" / "feedback.txt").read_text()
    assert "score: 0 / 12" in bob and "[hidden] sinusoidal_matches_reference (1.6): failed\n" in bob


def test_a_time_limit_keeps_the_questions_answered_before_it(cheat_batch):
    row = cheat_batch["loop"]
    assert (row.scores, row.error.split(" (")[0]) == (
        {"q1": 4.0, "q2": 3.0, "q3": 0.0, "q4": 0.0},
        "timed out after 60 s",
    )


def test_nothing_a_submission_started_survives_and_the_gradebook_stays_as_written(cheat_batch):
    survivors = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if SURVIVOR_TOKEN.encode() in cmdline.read_bytes():
                survivors.append(cmdline.parent.name)
        except OSError:
            continue
    assert survivors == [], "processes a submission started outlived its sandbox"
    # The PID namespace ended every process above, so nothing is left to write; wait past the forger's delay anyway
    time.sleep(max(0.0, cheat_batch["ended"] + 10 - time.monotonic()))
    assert cheat_batch["out"].read_bytes() == cheat_batch["bytes"]
    assert cheat_batch["leftovers"] == set(), "temporary grading folders were left behind"


# --- grading from the instructor's Python environment --------------------------------------------------------------


def _venv(where: Path, *options: str) -> Path:
    """A venv made from this interpreter that has the course installed as a user's would have it: its own
    site-packages holds a ``.pth`` naming this checkout and the site-packages this test process imports torch from
    (a venv made from a venv sees only the base interpreter's), and a module found nowhere else."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", *options, str(where)],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    site_dir = next((where / "lib").glob("python3*/site-packages"))
    sites = [p for p in sys.path if os.path.isdir(p) and any(Path(p).glob("*.dist-info"))]
    (site_dir / "course.pth").write_text("\n".join([str(ROOT), *sites]) + "\n")
    (site_dir / "only_in_this_environment.py").write_text("WHERE = 'this venv'\n")
    return where / "bin" / "python"


def test_grading_works_from_a_venv_a_copies_venv_and_this_interpreter(built_exercises, tmp_path):
    """The sandbox runs the grader's own environment: a venv with a symbolic link to its interpreter (the default;
    its packages only in the venv, here ``only_in_this_environment``), one with a copy (``--copies``), both under
    the temporary folder that the sandbox covers with its own tmpfs, and this interpreter. Each grades the solution
    full marks, run from another folder and without PYTHONPATH (the venvs have the course installed)."""
    name = "01_token_embedding"
    student = nbformat.read(built_exercises[name].student, as_version=4)
    solution = with_answers(student, dict(enumerate(solution_answers(built_exercises[name]))))
    solution.cells.insert(1, new_code_cell("import only_in_this_environment"))
    pythons = {"venv": _venv(tmp_path / "envs" / "venv"), "copies": _venv(tmp_path / "envs" / "copies", "--copies")}
    assert pythons["venv"].is_symlink() and not pythons["copies"].is_symlink()
    runs = {}
    for kind, python in {**pythons, "this interpreter": Path(sys.executable)}.items():
        folder = tmp_path / kind.replace(" ", "_")
        folder.mkdir()
        nb = solution if kind in pythons else with_answers(solution, {})
        if kind not in pythons:
            nb.cells.pop(1)  # the module lives only in the venvs
        nbformat.write(nb, folder / "solution.ipynb")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} if kind in pythons else dict(os.environ)
        command = [str(python), "-m", "course_embed.tools.cli", "grade", "solution.ipynb", "--out", "gb.csv",
                   "--root", str(ROOT / "exercises")]  # fmt: skip
        runs[kind] = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    suite = load_suite(ROOT / "exercises", name)
    for kind, proc in runs.items():
        printed = proc.communicate(timeout=600)[0].decode()
        assert proc.returncode == 0, (kind, printed)
        (row,) = csv.DictReader((tmp_path / kind.replace(" ", "_") / "gb.csv").open())
        assert (row["error"], float(row["total"])) == ("", sum(q.points for q in suite.questions)), (kind, row)


def test_the_check_before_a_batch_imports_what_a_runner_imports_and_says_the_fix(monkeypatch):
    sandbox.require_bwrap.cache_clear()
    monkeypatch.setattr(sandbox, "_PROBE", "import sys\nsys.path.insert(0, sys.argv[1])\nimport not_installed_here\n")
    try:
        with pytest.raises(sandbox.SandboxUnavailable) as err:
            sandbox.require_bwrap()
    finally:
        sandbox.require_bwrap.cache_clear()
    message = str(err.value)
    assert "No module named 'not_installed_here'" in message and sys.executable in message
    assert "-m pip install -r requirements.txt" in message


# --- what a hostile submission may put where the trusted side reads -----------------------------------------------


def _described(tensor: dict) -> dict:
    return {"__outcome__": True, "type": "Tensor", "value": {"__tensor__": True, "device": "cpu", **tensor}}


def test_gathered_tensors_are_validated_before_any_arithmetic(tmp_path):
    spec = _spec(tmp_path)
    flags = {"requires_grad": False, "is_param": False}
    forged = {
        "sparse indices outside its size": {
            "sparse": True, "coalesced": True, "size": [2], "indices": torch.tensor([[10**9]]),
            "values": torch.ones(1), **flags,
        },
        "sparse int32 indices": {
            "sparse": True, "size": [2], "indices": torch.tensor([[0]], dtype=torch.int32),
            "values": torch.ones(1), **flags,
        },
        "stride-0 view": {"sparse": False, "data": torch.zeros(1).as_strided((2**15, 2**15), (0, 0)), **flags},
        "overlapping view": {"sparse": False, "data": torch.arange(4.0).as_strided((2,), (0,)), **flags},
        "not a tensor": {"sparse": False, "data": [2.0, 4.0], **flags},
    }  # fmt: skip
    for what, tensor in forged.items():
        gathered = torch.load(_save(tmp_path, [_described(tensor), {"__outcome__": True, "raised": "TypeError"}]))
        passed, message = probe.check(spec, gathered)
        assert not passed and "not what the test gathers" in message, (what, message)
    honest_sparse = torch.sparse_coo_tensor(torch.tensor([[0, 1]]), torch.tensor([2.0, 4.0]), (2,)).coalesce()
    gathered = [{"__outcome__": True, "type": "Tensor", "value": probe._data(honest_sparse)}, {}]
    passed, message = probe.check(spec, torch.load(_save(tmp_path, gathered)))
    assert not passed and "must return a dense tensor" in message  # a sparse tensor only where a test asks for one
    back = restore(torch.load(_save(tmp_path, probe._data(honest_sparse))))
    assert back.sparse and back.coalesced and torch.equal(back.data.to_dense(), torch.tensor([2.0, 4.0]))
    unsorted = torch.sparse_coo_tensor(torch.tensor([[1, 0]]), torch.tensor([4.0, 2.0]), (2,))
    forged = {**probe._data(unsorted), "coalesced": True}  # claimed, not true: not taken
    assert not restore(torch.load(_save(tmp_path, forged))).coalesced


def test_outputs_are_read_without_links_pipes_or_inflation(tmp_path):
    torch.save({"secret": torch.ones(2)}, tmp_path / "host.pt")
    (tmp_path / "link.pt").symlink_to(tmp_path / "host.pt")
    os.mkfifo(tmp_path / "pipe.pt")
    bomb = tmp_path / "bomb.pt"
    torch.save(torch.zeros(17 * 2**20), tmp_path / "plain.pt")  # 68 MB, above the cap once inflated
    with zipfile.ZipFile(tmp_path / "plain.pt") as plain, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as out:
        for info in plain.infolist():
            out.writestr(info.filename, plain.read(info), zipfile.ZIP_DEFLATED)
    assert bomb.stat().st_size < 2**20
    names = ("link.pt", "pipe.pt", "bomb.pt")
    results = {}
    reader = threading.Thread(target=lambda: results.update({n: read_output(tmp_path / n) for n in names}))
    reader.daemon = True
    reader.start()
    reader.join(timeout=60)
    assert not reader.is_alive(), "reading a named pipe blocked"
    assert "not a regular file" in results["link.pt"].why
    assert "not a regular file" in results["pipe.pt"].why
    assert "compressed records" in results["bomb.pt"].why
    assert torch.equal(read_output(tmp_path / "host.pt")["secret"], torch.ones(2))  # a plain file still reads


def test_the_disk_check_counts_folders_and_entries_not_only_files(tmp_path):
    for i in range(submission.MAX_ENTRIES + 10):
        (tmp_path / f"d{i}").mkdir()
    used, entries = submission._disk_use(tmp_path, 2**40)
    assert entries > submission.MAX_ENTRIES
    assert used == sum(os.lstat(tmp_path / f"d{i}").st_blocks * 512 for i in range(submission.MAX_ENTRIES + 10))


def test_notes_from_the_sandbox_are_bounded_stripped_and_never_taken_as_observed(tmp_path):
    (tmp_path / "cells.json").write_text(json.dumps(["\x1b[2J=cmd|x" + "y" * 500] * 100 + ["limit:memory"]))
    notes = submission._notes(tmp_path)
    assert len(notes) == submission.MAX_NOTES + 1 and all(len(n) <= submission.NOTE_CHARS for n in notes)
    assert not any("\x1b" in n for n in notes)
    why = submission._why_stopped(4, notes + ["limit:memory"], Limits(), "", oom=False)
    assert why.startswith("as the notebook's run reported, stopped at the sandbox's memory limit")
    assert submission._why_stopped(4, ["limit:bogus"], Limits(), "Traceback | KeyError: 'x'", oom=False).endswith(
        "its last output: Traceback | KeyError: 'x'"
    )
    assert "memory limit (4 GiB for all its processes together)" in submission._why_stopped(137, [], Limits(), "", True)
    (tmp_path / "cells.json").unlink()
    os.mkfifo(tmp_path / "cells.json")
    assert submission._notes(tmp_path) == []


def test_malformed_files_get_a_row_not_an_exception(tmp_path):
    cases = {
        "digits.ipynb": '{"cells": [], "nbformat": ' + "9" * 5000 + "}",
        "deep.ipynb": "[" * 100_000 + "]" * 100_000,
        "otter.ipynb": '{"cells": [], "nbformat": 4, "metadata": {"otter": "x"}}',
        "cells.ipynb": '{"cells": [1, "x"], "nbformat": 4}',
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    assert read_submission(tmp_path / "digits.ipynb")[1].startswith("not a notebook")
    assert read_submission(tmp_path / "deep.ipynb")[1].startswith("not a notebook")
    assert notebook.notebook_exercise(read_submission(tmp_path / "otter.ipynb")[0]) is None
    assert "not JSON objects" in read_submission(tmp_path / "cells.ipynb")[1]
    with zipfile.ZipFile(tmp_path / "method.zip", "w") as zf:
        zf.writestr("a.ipynb", "{}")
    data = bytearray((tmp_path / "method.zip").read_bytes())
    for header, at in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):  # an unknown compression method
        data[data.index(header) + at] = 99
    (tmp_path / "method.zip").write_bytes(bytes(data))
    with zipfile.ZipFile(tmp_path / "big.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("a.ipynb", b" " * (notebook.MAX_SUBMISSION_BYTES + 1))
    with zipfile.ZipFile(tmp_path / "link.zip", "w") as zf:
        info = zipfile.ZipInfo("a.ipynb")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "../bob/03_sinusoidal.ipynb")
    assert read_submission(tmp_path / "method.zip")[1].startswith("cannot read the file")
    assert "larger than 50 MiB" in read_submission(tmp_path / "big.zip")[1]
    assert "symbolic link" in read_submission(tmp_path / "link.zip")[1]
    (tmp_path / "fifo.ipynb").unlink(missing_ok=True)
    os.mkfifo(tmp_path / "fifo.ipynb")
    assert "not a regular file" in read_submission(tmp_path / "fifo.ipynb")[1]
    found = find_submissions([tmp_path / "x_2026_13_45T99_99_99_000000.ipynb"])  # an impossible stamp: just a name
    assert [s.student for s in found.submissions] == ["x_2026_13_45T99_99_99_000000"]


def test_identity_and_time_come_from_folders_and_file_times(tmp_path):
    (tmp_path / "alice").mkdir()
    (tmp_path / "bob").mkdir()
    (tmp_path / "alice" / "03.ipynb").write_text("{}")
    (tmp_path / "bob" / "03.ipynb").write_text("{}")
    os.utime(tmp_path / "alice" / "03.ipynb", (1_700_000_000, 1_700_000_000))
    (tmp_path / "alice_2099_01_01T00_00_00_000000.ipynb").write_text("{}")  # beside alice/: not alice
    (tmp_path / "mallory").mkdir()
    (tmp_path / "mallory" / "03.ipynb").symlink_to(tmp_path / "bob" / "03.ipynb")
    (tmp_path / "eve").symlink_to(tmp_path / "bob", target_is_directory=True)
    found = find_submissions([tmp_path], layout="students")
    assert sorted(s.student for s in found.submissions) == ["alice", "alice_2099_01_01T00_00_00_000000.ipynb", "bob"]
    alice = next(s.path for s in found.submissions if s.student == "alice")
    assert batch.submitted_at(alice) == "2023-11-14T22:13:20Z"  # the file's time, not a stamp
    skipped = "\n".join(found.skipped)
    assert "mallory/03.ipynb: a symbolic link" in skipped and "eve: a symbolic link" in skipped
    assert safe_name("alice!") != safe_name("alice") == "alice" and safe_name("a/b") != safe_name("a_b")
    assert safe_name("alice~" + safe_name("alice!").split("~")[1]) != safe_name("alice!")  # no plain name takes it


def test_no_submission_text_reaches_a_spreadsheet_or_terminal_unneutralised(tmp_path):
    book = Gradebook(
        {"01_x": [Question("q1", 1.0, ("f",))]},
        [GradeRow('=HYPERLINK("http://x")', "@a.ipynb", "01_x", {"q1": 0.0}, "-1+1\x1b[2J\u202e")],
    )
    book.write(tmp_path / "gb.csv")
    row = list(csv.reader((tmp_path / "gb.csv").open()))[1]
    assert row[0].startswith("'=") and row[1] == "'@a.ipynb" and row[-1] == "'-1+1[2J"
    assert "\x1b" not in book.summary() and "\u202e" not in book.summary()


def test_an_answer_that_mentions_otter_in_a_comment_is_kept():
    cells = [
        new_code_cell("import otter\ngrader = otter.Notebook('x.ipynb')"),
        new_code_cell("# unlike otter.Notebook(...), this is mine\ndef f():\n    return 1"),
        new_code_cell("x = 2\ngrader.export(pdf=False)"),
        new_code_cell('grader.check("q1")'),
    ]
    steps = plan(json.loads(nbformat.writes(new_notebook(cells=cells))))
    assert [s.get("source") for s in steps] == [cells[1].source, "x = 2\n", None]


def test_the_checks_of_one_submission_run_apart_with_their_own_limits(tmp_path):
    """A check that never ends or crashes the process costs its own submission's row only: the checks run in a
    child process with a time limit, and another submission's checks finish meanwhile."""
    root = tmp_path / "exercises"
    (root / "checks").mkdir(parents=True)
    (root / "source").mkdir()
    (root / "checks" / "99_x.py").write_text(SPEC)
    (root / "source" / "99_x_hidden.py").write_text(
        "import os, signal, time\nfrom course_embed.tools.grading.probe import run, test\n\n"
        "@test('q1', points=1, hidden=True)\ndef stalls(f):\n    got = yield run(f, 1)\n"
        "    if got.value == 'stall':\n        time.sleep(600)\n"
        "    if got.value == 'crash':\n        os.kill(os.getpid(), signal.SIGSEGV)\n"
    )
    suite = load_suite(root, "99_x")
    outs = {}
    for kind in ("stall", "crash", "honest"):
        outs[kind] = tmp_path / kind
        outs[kind].mkdir()
        for spec in suite.tests:
            answer = _double if spec.name == "doubles" else (lambda value: lambda x: value)(kind)
            torch.save(probe.gather(spec, {"f": answer}), outs[kind] / f"{spec.name}.pt")
    with ThreadPoolExecutor(3) as pool:
        stalled = pool.submit(compare.score_apart, suite, outs["stall"], "", None, 300, wall=45)
        crashed = pool.submit(compare.score_apart, suite, outs["crash"], "", None, 300)
        honest, fine = compare.score_apart(suite, outs["honest"], "", None, 300)
        assert not stalled.done()  # the honest checks did not wait for the stalled ones
        (stalled, stall), (crashed, crash) = stalled.result(), crashed.result()
    assert [(r.score, r.ok) for r in honest] == [(0.0, True), (3.0, True)] and fine == ""  # public: feedback only
    assert stalled[0].ok and stall == stalled[1].output == (
        "the checks of these outputs took longer than 45 s of wall-clock time"
    )
    assert crashed[0].ok and "crashed" in crashed[1].output and crash == crashed[1].output


# --- the sandbox's confinement, as root and as an ordinary user ------------------------------------------------------

_CONFINED = """import ctypes, errno, json, os, resource, time
found = {"uid": os.getuid()}
def attempt(name, action):
    try:
        action()
        found[name] = "allowed"
    except OSError as err:
        found[name] = errno.errorcode.get(err.errno, str(err.errno))
attempt("sysctl", lambda: open("/proc/sys/kernel/printk_ratelimit_burst", "r+").close())
attempt("/", lambda: open("/x", "w").close())
attempt("/dev", lambda: open("/dev/x", "w").close())
attempt("/tmp", lambda: open("/tmp/x", "w").close())
attempt("/tmp beyond its size", lambda: open("/tmp/big", "wb").write(bytes(2 * 2**20)))
libc = ctypes.CDLL(None, use_errno=True)
found["user namespace"] = "allowed" if libc.unshare(0x10000000) == 0 else errno.errorcode[ctypes.get_errno()]
resource.setrlimit(resource.RLIMIT_NPROC, (8, 8))
forks = 0
try:
    for _ in range(20):
        if os.fork() == 0:
            time.sleep(2)
            os._exit(0)
        forks += 1
except BlockingIOError:
    pass
found["forks"] = forks
print(json.dumps(found))
"""


def _confined(command, work) -> dict:
    proc = sandbox.popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out)


def _expect_confined(found: dict) -> None:
    assert found["uid"] != 0
    assert found["sysctl"] in ("EROFS", "EACCES") and found["/"] == "EROFS" and found["/dev"] == "EROFS"
    assert found["/tmp"] == "allowed" and found["/tmp beyond its size"] == "ENOSPC"
    assert found["user namespace"] == "EPERM"
    assert found["forks"] < 8  # the process limit holds


def test_the_sandbox_never_runs_with_host_privileges(tmp_path):
    """Whoever grades (root, here, when the tests run as root): no host user id 0, read-only /proc/sys, / and /dev,
    sized /tmp, no nested user namespace, and a process limit that holds."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "confined.py").write_text(_CONFINED)
    uid = confine.sandbox_uid()
    found = _confined(sandbox.python(work, "confined.py", Limits(disk=2**20), uid), work)
    _expect_confined(found)
    if os.geteuid() == 0:
        assert found["uid"] == uid


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or not os.path.exists("/usr/bin/python3"),
    reason="needs root, to start the grader's sandbox as the user nobody too",
)
def test_the_sandbox_of_an_ordinary_user_is_confined_the_same_way(monkeypatch):
    work = Path(tempfile.mkdtemp(prefix="course-embed-nobody-"))
    try:
        work.chmod(0o755)
        (work / "confined.py").write_text(_CONFINED)
        (work / "confined.py").chmod(0o644)
        monkeypatch.setattr(sandbox.os, "geteuid", lambda: 65534)
        monkeypatch.setattr(sandbox, "environment", lambda: [])  # the system's Python, which nobody can read
        command = sandbox.command(work, ["/usr/bin/python3", "-I", "/work/confined.py"], Limits(disk=2**20))
        assert "--disable-userns" in command
        nobody = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--"]
        found = _confined(nobody + command, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _expect_confined(found)
    assert found["uid"] == 65534


@pytest.fixture(scope="module")
def mixed_batch(built_exercises, tmp_path_factory):
    """Honest, broken and hostile submissions of exercise 03 (grading_cases/hostile.py), graded in one batch
    through the command, under --memory 2G."""
    folder = tmp_path_factory.mktemp("mixed")
    student = nbformat.read(built_exercises["03_sinusoidal"].student, as_version=4)
    solution = solution_answers(built_exercises["03_sinusoidal"])
    probe_cgroup = confine.MemoryCgroup(2**30, f"course-embed-probe-{os.getpid()}")
    has_cgroup = probe_cgroup.path is not None
    probe_cgroup.remove()
    cases = build_mixed_batch(folder / "batch", student, solution, has_cgroup)
    out = folder / "gradebook.csv"
    command = ["grade", str(folder / "batch"), "--out", str(out), "--root", str(ROOT / "exercises"), "--memory", "2G"]
    code = main(command)
    return code, cases, out, folder


def test_a_mixed_batch_finishes_with_a_row_for_each_and_honest_full_marks(mixed_batch):
    code, cases, out, folder = mixed_batch
    assert code == 0
    rows = {r["submission"]: r for r in csv.DictReader(out.open())}
    assert len(rows) == len(cases)
    for case in cases:
        row = rows[str(folder / "batch" / case.path)]
        _assert_scores(row, case)
        assert case.error in row["error"], (case.path, row["error"])
        assert not any(bad in row["error"] for bad in case.never), (case.path, row["error"])
        assert len(row["error"]) < 6000 and row["error"].count("--memory 64G") <= 20
    feedback = [p for p in (folder / "gradebook-feedback").rglob("*") if p.is_file()]  # <student>/<exercise>/...
    assert len(feedback) >= 2 * sum(c.scores != NOT_READ for c in cases) and not any(
        "\x1b" in p.read_text() for p in feedback
    )


def test_the_repository_stays_hidden_where_the_environment_holds_it(tmp_path, monkeypatch):
    """An environment folder that holds the repository (a prefix above it) shows it empty and read-only, while a
    venv inside the repository stays visible."""
    env, repo = tmp_path / "prefix", tmp_path / "prefix" / "course"
    (repo / "exercises" / "source").mkdir(parents=True)
    (repo / "exercises" / "source" / "solution.txt").write_text("the answer")
    (repo / ".venv").mkdir()
    (repo / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    monkeypatch.setattr(sandbox, "environment", lambda: [(str(env), str(env)), (str(repo / ".venv"),) * 2])
    monkeypatch.setattr(sandbox, "_hidden", lambda: [str(repo)])
    work = tmp_path / "work"
    work.mkdir()
    script = f"ls -A {repo}; cat {repo}/.venv/pyvenv.cfg; touch {repo}/x 2>&1 | grep -c Read-only"
    command = sandbox.command(work, ["/bin/sh", "-c", script], uid=confine.sandbox_uid())
    proc = sandbox.popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    printed = proc.communicate(timeout=60)[0].split()
    assert printed == [".venv", "home", "=", "/usr/bin", "1"], printed
