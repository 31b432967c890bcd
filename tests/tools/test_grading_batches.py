"""How a class is handed in: one row per (student, exercise) for every layout, or a refusal naming the files; names
that stay printable and distinct; submissions read apart under limits; the parser entered by one thread at a time;
the checks' limits in CPU time; and the help that states the limits the grader applies."""

import ast
import csv
import json
import os
import re
import threading
from pathlib import Path

import pytest

from course_embed.tools.cli import main
from course_embed.tools.grading import compare, notebook
from course_embed.tools.grading.compare import Question, TestResult, load_suite
from course_embed.tools.grading.feedback import feedback_text, results_json
from course_embed.tools.grading.gradebook import Gradebook, GradeRow, LayoutError, find_submissions, safe_name, shown
from course_embed.tools.grading.limits import Limits, format_size
from course_embed.tools.grading.submission import plan

from .grading_cases import ROOT, exercise_notebook


def _hand_in(folder: Path, files: dict[str, str | None]) -> None:
    """Write each ``path: exercise`` (``None``: a notebook made for no exercise) under ``folder``."""
    for name, exercise in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(exercise_notebook(exercise))


def _rows(found) -> set[tuple[str, str | None]]:
    return {(s.student, s.exercise) for s in found.submissions}


def test_every_way_a_class_is_handed_in_gives_one_row_per_student_and_exercise(tmp_path):
    subs = tmp_path / "subs"
    _hand_in(subs, {f"{s}/03_sinusoidal.ipynb": "03_sinusoidal" for s in ("alice", "bob", "carol")})
    expected = {("alice", "03_sinusoidal"), ("bob", "03_sinusoidal"), ("carol", "03_sinusoidal")}
    assert _rows(find_submissions([subs])) == expected  # a folder of student folders
    assert _rows(find_submissions(sorted(subs.iterdir()))) == expected  # the shell's subs/*
    assert _rows(find_submissions([subs / "alice", subs / "bob", subs / "carol"])) == expected  # folders by name
    _hand_in(tmp_path / "learn13", {f"{e}.ipynb": e for e in ("01_token_embedding", "02_scaling", "03_sinusoidal")})
    several = find_submissions([tmp_path / "learn13"])
    assert _rows(several) == {("learn13", e) for e in ("01_token_embedding", "02_scaling", "03_sinusoidal")}
    assert several.skipped == []


def test_nested_folders_belong_to_their_student_and_change_nobody_elses_exercise(tmp_path):
    """An LMS or GitHub Classroom export: a student's repository holds folders; four notebooks of another
    exercise in mallory's folder make rows of hers only."""
    files = {"alice/03_sinusoidal.ipynb": "03_sinusoidal", "bob/03_sinusoidal.ipynb": "03_sinusoidal"}
    files |= {f"mallory/work/v{i}/02_scaling.ipynb": "02_scaling" for i in range(4)}
    files["mallory/03_sinusoidal.ipynb"] = "03_sinusoidal"
    _hand_in(tmp_path / "class", files)
    with pytest.raises(LayoutError, match=r"mallory handed in 02_scaling in 4 folders .*--layout student"):
        find_submissions([tmp_path / "class"])
    found = find_submissions([tmp_path / "class"], layout="students")
    assert _rows(found) == {
        ("alice", "03_sinusoidal"),
        ("bob", "03_sinusoidal"),
        ("mallory", "03_sinusoidal"),
        ("mallory", "02_scaling"),
    }
    assert sum("mallory handed in a later file for 02_scaling" in s for s in found.skipped) == 3


def test_the_same_name_in_two_folders_is_two_students_and_ambiguity_is_refused(tmp_path):
    _hand_in(tmp_path, {"sec1/alice/03.ipynb": "03_sinusoidal", "sec2/alice/03.ipynb": "03_sinusoidal"})
    found = find_submissions([tmp_path / "sec1", tmp_path / "sec2"])
    assert sorted(s.student for s in found.submissions) == [
        shown(tmp_path / "sec1/alice"),
        shown(tmp_path / "sec2/alice"),
    ]
    _hand_in(tmp_path / "flat", {"ann.ipynb": "03_sinusoidal", "ben.ipynb": "03_sinusoidal"})
    with pytest.raises(LayoutError, match=r"2 files for 03_sinusoidal lie at the top.*ann.ipynb.*--layout students"):
        find_submissions([tmp_path / "flat"])
    assert _rows(find_submissions([tmp_path / "flat"], layout="students")) == {
        ("ann.ipynb", "03_sinusoidal"),
        ("ben.ipynb", "03_sinusoidal"),
    }
    assert _rows(find_submissions([tmp_path / "flat"], layout="student")) == {("flat", "03_sinusoidal")}
    code = main(["grade", str(tmp_path / "flat"), "--out", str(tmp_path / "gb.csv"), "--root", str(ROOT / "exercises")])
    assert code == 2 and not (tmp_path / "gb.csv").exists()


def test_with_exercise_other_exercises_are_skipped_and_listed(tmp_path):
    _hand_in(tmp_path / "learn13", {"01.ipynb": "01_token_embedding", "03.ipynb": "03_sinusoidal"})
    found = find_submissions([tmp_path / "learn13"], exercise="03_sinusoidal")
    assert _rows(found) == {("learn13", "03_sinusoidal")}
    assert any("01.ipynb: made for 01_token_embedding, not 03_sinusoidal" in s for s in found.skipped)


def test_names_are_printable_distinct_and_cost_nothing_but_their_own_escaping(tmp_path):
    names = [b"\xe9lodie", b"\\xe9lodie", b"eve\nalice (alice.ipynb): plagiarism", b"mal\x1b]0;x\x07lory"]
    for raw in names:
        folder = os.path.join(os.fsencode(tmp_path / "class"), raw)
        os.makedirs(folder)
        Path(os.fsdecode(os.path.join(folder, b"03.ipynb"))).write_text(exercise_notebook("03_sinusoidal"))
    found = find_submissions([tmp_path / "class"])
    students = sorted(s.student for s in found.submissions)
    assert students == sorted(["\\xe9lodie", "\\\\xe9lodie", "eve\\x0aalice (alice.ipynb): plagiarism",
                               "mal\\x1b]0;x\\x07lory"])  # fmt: skip
    assert all(s.isprintable() for s in students) and len({safe_name(s) for s in students}) == len(students)
    book = Gradebook(
        {"03_sinusoidal": [Question("q1", 1.0, ("f",))]},
        [GradeRow(s.student, shown(s.path), "03_sinusoidal", {"q1": 1.0}) for s in found.submissions],
    )
    book.write(tmp_path / "gb.csv")
    rows = list(csv.DictReader((tmp_path / "gb.csv").open(encoding="utf-8")))
    assert sorted(r["student"] for r in rows) == students
    assert all(line.isprintable() for line in book.summary().splitlines())


def test_a_gradebook_of_several_exercises_has_each_rows_own_questions(tmp_path):
    book = Gradebook(
        {"01_x": [Question("q1", 2.0, ())], "02_y": [Question("q1", 1.0, ()), Question("q2", 3.0, ())]},
        [GradeRow("ann", "a", "01_x", {"q1": 2.0}), GradeRow("ann", "b", "02_y", {"q1": 1.0, "q2": 1.5})],
    )
    book.write(tmp_path / "gb.csv")
    rows = list(csv.DictReader((tmp_path / "gb.csv").open()))
    assert [(r["q1"], r["q2"], r["total"], r["possible"]) for r in rows] == [
        ("2", "", "2", "2"),
        ("1", "1.5", "2.5", "4"),
    ]


def test_submissions_are_read_in_a_child_with_a_memory_limit(tmp_path, monkeypatch):
    """A notebook whose JSON takes far more memory than its bytes costs the child reading it, not the grader."""
    bomb = tmp_path / "bomb.ipynb"
    bomb.write_text('{"nbformat": 4, "cells": [' + ",".join(["{}"] * 3_000_000) + "]}")
    monkeypatch.setattr(notebook, "READ_MEMORY", 200 * 2**20)
    reading = notebook.read_apart(bomb)
    assert reading.exercise is None and "needs more than" in reading.error
    honest = notebook.read_apart(ROOT / "exercises" / "03_sinusoidal.ipynb", tmp_path / "plan.json", {"X": 1})
    assert honest == notebook.Reading("03_sinusoidal", "")
    written = json.loads((tmp_path / "plan.json").read_text())
    nb = json.loads((ROOT / "exercises" / "03_sinusoidal.ipynb").read_text())
    assert written == {"steps": plan(nb), "limits": {"X": 1}}


def test_the_plan_names_each_cell_by_the_check_after_it():
    cells = [{"cell_type": "code", "source": s, "metadata": {"tags": [notebook.ANSWER_TAG]}}
             for s in ("a = 1", "b = 2", 'grader.check("q1")', "c = 3", 'grader.check("q2")', "d = 4")]  # fmt: skip
    steps = plan({"cells": cells})
    assert [s.get("label") or s["checkpoint"] for s in steps] == [
        "q1's answer cell", "q1's answer cell", "q1", "q2's answer cell", "q2", "the cell `d = 4`",
    ]  # fmt: skip


def test_the_parser_is_entered_by_one_thread_at_a_time(monkeypatch, tmp_path):
    """CPython 3.11's parser is not thread-safe: every ast.parse of the grading code holds notebook.PARSER."""
    calls = []
    real = ast.parse

    def guarded(*args, **kwargs):
        calls.append(notebook.PARSER.locked())
        return real(*args, **kwargs)

    monkeypatch.setattr(ast, "parse", guarded)
    load_suite(ROOT / "exercises", "03_sinusoidal")
    plan({"cells": [{"cell_type": "code", "source": "import otter\ngrader = otter.Notebook('x')"}]})
    assert calls and all(calls)
    grading = ROOT / "course_embed" / "tools" / "grading"
    unguarded = [p.name for p in grading.glob("*.py") if "ast.parse(" in p.read_text() and p.name != "notebook.py"]
    assert unguarded == []
    errors = []

    def load():
        try:
            for _ in range(5):
                load_suite(ROOT / "exercises", "05_rope_alibi")
        except Exception as err:  # the race shows as SystemError
            errors.append(err)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def _tiny_suite(root: Path, public: str, hidden: str):
    """Exercise ``99_x`` under ``root`` with these test files' bodies (after the imports)."""
    (root / "checks").mkdir(parents=True)
    (root / "source").mkdir()
    head = "import time\nfrom course_embed.tools.grading.probe import run, test\n\n"
    (root / "checks" / "99_x.py").write_text(head + public)
    (root / "source" / "99_x_hidden.py").write_text(head + hidden)
    return load_suite(root, "99_x")


def test_the_checks_count_cpu_time_so_a_busy_machine_costs_no_point(tmp_path):
    """A check that waits 12 s but uses little CPU passes under a 10 s CPU limit (a wall-clock limit, which a
    busy machine stretches, would have failed it)."""
    suite = _tiny_suite(
        tmp_path / "exercises",
        "@test('q1', points=1)\ndef doubles(f):\n    got = yield run(f, 2)\n"
        "    assert got.value == 4, 'f(2) must be 4'\n",
        "@test('q1', points=1, hidden=True)\ndef waits(f, *, seed):\n    got = yield run(f, 1)\n    time.sleep(12)\n"
        "    assert got.value == 2, 'f(1) must be 2'\n",
    )
    import torch

    from course_embed.tools.grading import probe

    out = tmp_path / "out"
    out.mkdir()
    waits = next(t for t in suite.tests if t.name == "waits")
    torch.save(probe.gather(waits, {"f": lambda x: 2 * x}, seed=5), out / "waits.pt")
    results, problem = compare.score_apart(suite, out, seconds=10, seed=5)
    assert ([(r.name, r.score) for r in results], problem) == ([("doubles", 0.0), ("waits", 2.0)], "")


def test_public_tests_are_feedback_and_the_hidden_tests_carry_each_questions_points(tmp_path):
    """Learners hold the public checks' expected values: replaying them earns nothing. Each question keeps the
    points its notebook states, shared by its hidden tests (and any public test drawing its inputs from the seed)."""
    for name in ("01_token_embedding", "02_scaling", "03_sinusoidal", "04_fusion", "05_rope_alibi", "06_optimization"):
        suite = load_suite(ROOT / "exercises", name)
        points = suite.graded_points
        for q in suite.questions:
            mine = [t for t in suite.tests if t.question == q.name]
            assert sum(points[t.name] for t in mine) == pytest.approx(q.points), (name, q.name)
            assert all(points[t.name] == 0 for t in mine if not t.hidden and not t.seeded), (name, q.name)
    suite = _tiny_suite(
        tmp_path / "exercises",
        "@test('q1', points=1)\ndef doubles(f):\n    got = yield run(f, 2)\n"
        "    assert got.value == 4, 'f(2) must be 4'\n\n"
        "@test('q1', points=1)\ndef drawn(f, *, seed):\n    got = yield run(f, seed % 7 + 3)\n"
        "    assert got.value == 2 * (seed % 7 + 3), 'f doubles'\n",
        "@test('q1', points=2, hidden=True)\ndef hidden(f, *, seed):\n    got = yield run(f, 3)\n"
        "    assert got.value == 6, 'f(3) must be 6'\n",
    )
    assert suite.graded_points == {"doubles": 0.0, "drawn": 4 / 3, "hidden": 8 / 3}
    import torch

    from course_embed.tools.grading import probe

    out = tmp_path / "out"
    out.mkdir()
    replay = {"f": lambda x: 4 if x == 2 else 0}  # the public check's stored value, no implementation
    for spec in suite.tests:
        torch.save(probe.gather(spec, replay, seed=11), out / f"{spec.name}.pt")
    results = compare.score(suite, out, seed=11)
    assert [(r.name, r.score, r.max_score, r.ok) for r in results] == [
        ("doubles", 0.0, 0.0, True), ("drawn", 0.0, 4 / 3, False), ("hidden", 0.0, 8 / 3, False),
    ]  # fmt: skip
    text = feedback_text("ann", "99_x", suite.questions, results, "")
    assert "[public] doubles (no points): passed" in text and "are feedback" in text
    (tmp_path / "exercises" / "source" / "99_x_hidden.py").write_text("")
    with pytest.raises(ValueError, match="q1: no hidden test and no public test drawing its inputs"):
        _tiny_suite(tmp_path / "again", "@test('q1', points=1)\ndef t(f):\n    got = yield run(f, 2)\n", "")


def test_the_help_states_the_limits_the_grader_applies(capsys):
    with pytest.raises(SystemExit):
        main(["grade", "--help"])
    printed = capsys.readouterr().out
    text = " ".join(printed.split())
    described = " ".join(printed.split("options:", 1)[1].split())  # after the usage line
    applied = Limits()
    for option, value in (("--memory", applied.memory), ("--file-size", applied.file_size), ("--disk", applied.disk)):
        said = re.search(rf"{option} SIZE .*?default (\d+)([KMG])\b", described)
        assert said and int(said.group(1)) * 1024 ** " KMG".index(said.group(2)) == value, option
    for option, value in (("--processes", applied.processes), ("--cpu-time", applied.cpu_time)):
        said = re.search(rf"{option} \S+ .*?default (\d+)\b", described)
        assert said and int(said.group(1)) == value, option
    assert applied.rlimits()["RLIMIT_NPROC"] == applied.processes
    assert "not enforced" not in text and "Every limit holds when grading as root too" in text
    said = re.search(r"limited to (\d+) s of CPU time and ([\d.]+ \w+) of memory", text)
    assert said and (int(said.group(1)), said.group(2)) == (compare.CHECK_SECONDS, format_size(compare.CHECK_MEMORY))
    page = (ROOT / "book" / "instructors.md").read_text()
    for option in re.findall(r"\[(--[a-z-]+)", text):  # every option of the usage line is on the instructors' page
        assert f"`{option}" in page, option


def test_feedback_shows_of_the_hidden_tests_only_what_results_json_shows_before_publication():
    results = [
        TestResult("public_one", "q1", 0.0, 1.0, "f(2) is 3, expected 4", False),
        TestResult("hidden_one", "q1", 0.0, 2.0, "f(24, 96, 100.0) is off: SECRET_INPUT", True),
    ]
    text = feedback_text("ann", "01_x", [Question("q1", 3.0, ())], results, "")
    assert "f(2) is 3, expected 4" in text and "SECRET_INPUT" not in text
    assert "[hidden] hidden_one (2): failed\n" in text
    data = results_json(results, "", 1.0)
    assert data["output_format"] == "text" and all(t["output_format"] == "text" for t in data["tests"])
    assert [t["visibility"] for t in data["tests"]] == ["visible", "after_published"]


def test_ctrl_c_while_reading_kills_the_readers_and_reads_no_further_file(tmp_path, monkeypatch):
    """Each file is read in a child of its own: Ctrl-C (or SIGTERM, raised the same way) kills the children
    reading now and cancels the files still waiting, instead of reading the whole class first."""
    import _thread
    import signal
    import time

    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setattr(notebook, "_CHILD", f"import os, time; open('{pids}/' + str(os.getpid()), 'w'); time.sleep(60)")
    _hand_in(tmp_path / "class", {f"s{i:02d}/03.ipynb": "03_sinusoidal" for i in range(20)})
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(1.5, _thread.interrupt_main)
    start = time.monotonic()
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            find_submissions([tmp_path / "class"], jobs=2)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - start < 10
    started = [int(p.name) for p in pids.iterdir()]
    assert 1 <= len(started) <= 4  # two at a time, the rest never started
    time.sleep(0.5)
    for pid in started:  # killed and reaped, not left sleeping
        assert not os.path.exists(f"/proc/{pid}") or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_the_cpu_limits_exit_status_is_taken_as_observed_only_when_the_cpu_time_allows_it():
    from course_embed.tools.grading import submission

    given = submission._why_stopped(152, [], Limits(), "", oom=False, cpu=3.2)
    assert "ended with exit status 152 after 3 s of CPU time in all" in given and "no limit stopped it" in given
    assert "--cpu-time" not in given
    observed = submission._why_stopped(152, [], Limits(cpu_time=10), "", oom=False, cpu=11.0)
    assert "which the CPU time limit gives, after 11 s of CPU time" in observed and "--cpu-time 20" in observed


def test_each_sandbox_gets_a_cpu_cgroup_of_one_cpu_where_one_can_be_made():
    """A submission's many busy processes, each in its own process session (setsid), share one CPU cgroup: one CPU
    at most, the same weight as its neighbour's, whatever the number of processes."""
    import subprocess

    from course_embed.tools.grading import confine

    cgroup = confine.MemoryCgroup(2**31, f"course-embed-test-{os.getpid()}")
    try:
        if cgroup.cpu.path is None and cgroup.version != "2":
            pytest.skip("no cpu cgroup can be made here")
        if cgroup.cpu.path is not None:
            assert (cgroup.cpu.path / "cpu.cfs_quota_us").read_text().strip() == "100000"
            assert (cgroup.cpu.path / "cpu.shares").read_text().strip() == "1024"
        joined = subprocess.run(cgroup.wrap(["cat", "/proc/self/cgroup"]), capture_output=True, text=True, check=True)
        joined_to = {line.split(":", 2)[1]: line.split(":", 2)[2] for line in joined.stdout.splitlines()}
        name = f"course-embed-test-{os.getpid()}"
        assert any(p.endswith(name) for p in joined_to.values())
        if cgroup.cpu.path is not None:
            assert joined_to["cpu"].endswith(name)
    finally:
        cgroup.remove()
    assert cgroup.cpu.path is None or not cgroup.cpu.path.exists()
