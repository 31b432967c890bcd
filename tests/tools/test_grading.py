"""Grading is real: solutions score full marks, blank notebooks zero, partial answers partial credit, answers that
reuse course_embed's implementation nothing, and every kind of broken submission gets its own row and a clear error.

The round trips run real kernels through otter's local runner (no Docker); the helpers are tested without one.
"""

import csv
import functools
import threading
import zipfile
from concurrent.futures import ThreadPoolExecutor

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_notebook

import course_embed as ce
from course_embed.tools import grading
from course_embed.tools.cli import main
from course_embed.tools.grading import (
    Gradebook,
    GradeRow,
    Question,
    answer_digest,
    assert_own_work,
    call_own,
    check_measurement,
    grade_batch,
    infer_exercise,
    missing_answers,
    read_questions,
    read_submission,
)

from .grading_cases import (  # noqa: F401
    ALIASES,
    NAMES,
    answer_cells,
    built_exercises,
    solution_answers,
    with_answers,
)

# --- the helpers the exercises' tests use ------------------------------------------------------------------------


class OwnEmbedding(torch.nn.Module):
    def forward(self, ids):
        return ids * 2


class Subclassed(ce.TokenEmbedding):
    pass


def test_assert_own_work_rejects_the_reference_however_it_is_renamed():
    for shortcut in (ce.TokenEmbedding, ce.sinusoidal_table, functools.partial(ce.sinusoidal_table, base=100.0),
                     Subclassed, Subclassed(5, 4), ce.TokenEmbedding(5, 4), functools.wraps(ce.tie_weights)(lambda: 0)):
        with pytest.raises(AssertionError, match="course_embed"):
            assert_own_work("answer", shortcut)
    for missing in (None, Ellipsis):
        with pytest.raises(AssertionError, match="not defined"):
            assert_own_work("answer", missing)
    assert_own_work("answer", OwnEmbedding)
    assert_own_work("answer", OwnEmbedding())
    assert_own_work("answer", lambda x: x + 1)


def test_call_own_catches_a_wrapper_of_the_reference_and_lets_own_code_through():
    def wrapper(length, d_model):
        return ce.sinusoidal_table(length, d_model)

    def own(length, d_model):
        return torch.zeros(length, d_model) + 1

    with pytest.raises(AssertionError, match="sinusoidal.sinusoidal_table"):
        call_own("wrapper", wrapper, 3, 4)
    with pytest.raises(AssertionError, match="sinusoidal"):  # not the reference's own ValueError for odd widths
        call_own("wrapper", wrapper, 3, 5)
    assert torch.equal(call_own("own", own, 3, 4), torch.ones(3, 4))
    with pytest.raises(AssertionError, match="TransformerEmbedding"):  # composition: the reference built inside
        call_own("Composed", lambda: torch.nn.ModuleList([ce.TransformerEmbedding(5, 4)]))
    assert call_own("Own", OwnEmbedding)(torch.tensor([3])).item() == 6


def test_check_measurement_accepts_a_band_and_never_shows_the_answer():
    answer, salt = 22.634976569187753, "ex/q"
    digest = answer_digest(answer, 2, salt)
    for good in (answer, answer + 0.004, answer - 0.004, torch.tensor(answer)):
        check_measurement("x", good, digest, decimals=2, salt=salt)
    for wrong in (answer + 0.02, answer - 0.02, 22.0, 2 * answer):
        with pytest.raises(AssertionError) as err:
            check_measurement("x", wrong, digest, decimals=2, salt=salt)
        assert "22.6" not in str(err.value)
    assert answer_digest(answer, 2, "other/q") != digest  # salted: the same number in another question differs
    for not_a_number in (None, Ellipsis, "22.63", True, float("nan")):
        with pytest.raises(AssertionError, match="`x` must"):
            check_measurement("x", not_a_number, digest, decimals=2, salt=salt)
    whole = answer_digest(6, 0, salt)
    check_measurement("k", 6, whole, decimals=0, salt=salt)
    for near in (5, 7):  # an integer answer is exact: no rounding band
        with pytest.raises(AssertionError):
            check_measurement("k", near, whole, decimals=0, salt=salt)


def test_read_submission_says_what_is_wrong(tmp_path):
    cases = {"truncated.ipynb": b'{"cells": [', "binary.ipynb": b"\xff\xfe\x00", "list.ipynb": b"[1, 2]",
             "notes.zip": b"not a zip"}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    assert read_submission(tmp_path / "truncated.ipynb")[1].startswith("not a notebook: invalid JSON")
    assert "UTF-8" in read_submission(tmp_path / "binary.ipynb")[1]
    assert "nbformat 4" in read_submission(tmp_path / "list.ipynb")[1]
    assert read_submission(tmp_path / "notes.zip")[1].startswith("cannot read the file")
    assert read_submission(tmp_path / "missing.ipynb")[1].startswith("cannot read the file")
    with zipfile.ZipFile(tmp_path / "two.zip", "w") as zf:
        zf.writestr("a.ipynb", nbformat.writes(new_notebook()))
        zf.writestr("b.ipynb", nbformat.writes(new_notebook()))
    assert "2 notebooks" in read_submission(tmp_path / "two.zip")[1]
    with zipfile.ZipFile(tmp_path / "one.zip", "w") as zf:
        zf.writestr("sub/a.ipynb", nbformat.writes(new_notebook(cells=[new_code_cell("x = 1")])))
        zf.writestr(".OTTER_LOG", b"\x00")
    nb, error = read_submission(tmp_path / "one.zip")
    assert error == "" and "".join(nb["cells"][0]["source"]) == "x = 1"


def test_missing_answers_names_the_question_and_ignores_magics():
    questions = [Question("q1", 3.0, ("f",)), Question("q2", 2.0, ("Model", "g")), Question("q3", 1.0, ("x",))]
    nb = new_notebook(cells=[new_code_cell("%matplotlib inline\ndef f(a):\n    return a"),
                             new_code_cell("class Model:\n    pass"), new_code_cell("def g(:\n  pass"),
                             new_code_cell("from math import tau as x")])
    assert missing_answers(nb, questions) == ["q2: no cell defines `g` (answer cell deleted or renamed?)"]


def test_infer_exercise_takes_the_majority_and_refuses_to_guess(tmp_path):
    def write(name, exercise):
        nb = new_notebook()
        if exercise:
            nb.metadata["otter"] = {"assignment_name": exercise}
        nbformat.write(nb, tmp_path / name)
        return tmp_path / name

    a, b, c = write("a.ipynb", "01_x"), write("b.ipynb", "01_x"), write("c.ipynb", "02_y")
    plain = write("p.ipynb", None)
    assert infer_exercise([a, b, c, plain]) == "01_x"
    with pytest.raises(ValueError, match="--exercise"):
        infer_exercise([a, c])
    with pytest.raises(ValueError, match="--exercise"):
        infer_exercise([plain])


def test_gradebook_is_written_atomically(tmp_path, monkeypatch):
    book = Gradebook("01_x", [Question("q1", 2.0, ("f",)), Question("q2", 1.5, ("g",))],
                     [GradeRow("a.ipynb", "01_x", {"q1": 2.0, "q2": 0.5}),
                      GradeRow("b.ipynb", "01_x", {"q1": 0.0, "q2": 0.0}, "cell 3: ValueError: no, \"quoted\"")])
    out = tmp_path / "gradebook.csv"
    book.write(out)
    rows = list(csv.reader(out.open()))
    assert rows == [["submission", "exercise", "q1", "q2", "total", "possible", "error"],
                    ["a.ipynb", "01_x", "2", "0.5", "2.5", "3.5", ""],
                    ["b.ipynb", "01_x", "0", "0", "0", "3.5", 'cell 3: ValueError: no, "quoted"']]
    before = out.read_bytes()

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(grading.os, "replace", crash)
    book.rows.pop()
    with pytest.raises(OSError):
        book.write(out)
    assert out.read_bytes() == before  # the old gradebook survives whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gradebook.csv"]  # no temporary file left behind


def test_batch_runs_two_at_a_time_keeps_order_and_saves_after_each_row(tmp_path, monkeypatch, built_exercises):
    autograder = built_exercises["01_token_embedding"].autograder
    barrier = threading.Barrier(2, timeout=30)
    seen_on_disk = []

    def fake_grade(path, exercise, autograder, questions, timeout):
        if path.name == "boom.ipynb":
            raise RuntimeError("a bug in the grader")
        if path.name in ("a.ipynb", "b.ipynb"):
            barrier.wait()  # passes only if both run at the same time
        return GradeRow(str(path), exercise, {q.name: 1.0 for q in questions})

    def on_result(row):
        seen_on_disk.append(len(list(csv.reader((tmp_path / "gb.csv").open()))) - 1)

    monkeypatch.setattr(grading, "grade_submission", fake_grade)
    paths = [tmp_path / n for n in ("a.ipynb", "b.ipynb", "boom.ipynb", "c.ipynb")]
    book = grade_batch(paths, tmp_path / "gb.csv", exercise="01_token_embedding", autograder=autograder, jobs=2,
                       on_result=on_result)
    assert [r.submission for r in book.rows] == [str(p) for p in paths]
    assert [r.total for r in book.rows] == [3.0, 3.0, 0.0, 3.0]
    assert book.rows[2].error == "internal grading error: RuntimeError: a bug in the grader"
    assert seen_on_disk == [1, 2, 3, 4]  # the gradebook on disk grows with every finished submission


def test_read_questions_gives_points_and_answer_names(built_exercises):
    questions = read_questions(built_exercises["01_token_embedding"].autograder)
    assert [(q.name, q.points, q.answers) for q in questions] == [
        ("q1", 3.0, ("init_embedding_",)), ("q2", 4.0, ("TokenEmbedding",)), ("q3", 2.0, ("mean_row_norm",))]


# --- round trips through otter's local runner ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def graded(built_exercises, tmp_path_factory):
    """Per exercise, the gradebook rows of three notebooks: the solution; the untouched student notebook; and a
    partly right one, whose answers in ALIASES reuse course_embed's implementation and whose other answers are the
    solution's. Two exercises are graded at a time, one notebook each."""

    def grade(name):
        built = built_exercises[name]
        folder = tmp_path_factory.mktemp(name)
        student = nbformat.read(built.student, as_version=4)
        answers = solution_answers(built)
        notebooks = {"solution": with_answers(student, dict(enumerate(answers))), "untouched": student,
                     "partial": with_answers(student, {k: ALIASES[name].get(k, a) for k, a in enumerate(answers)})}
        paths = []
        for kind, nb in notebooks.items():
            nbformat.write(nb, folder / f"{kind}.ipynb")
            paths.append(folder / f"{kind}.ipynb")
        done = []
        book = grade_batch(paths, folder / "gradebook.csv", exercise=name, autograder=built.autograder, jobs=1,
                           on_result=done.append, timeout=240)
        assert len(done) == len(paths)
        return {kind: row for kind, row in zip(notebooks, book.rows)}, book

    with ThreadPoolExecutor(2) as pool:
        return dict(zip(NAMES, pool.map(grade, NAMES)))


@pytest.mark.parametrize("name", NAMES)
def test_solution_scores_full_marks(graded, name):
    rows, book = graded[name]
    assert rows["solution"].error == ""
    assert rows["solution"].scores == {q.name: q.points for q in book.questions}


@pytest.mark.parametrize("name", NAMES)
def test_untouched_student_notebook_scores_zero(graded, name):
    rows, book = graded[name]
    assert rows["untouched"].scores == {q.name: 0.0 for q in book.questions}


@pytest.mark.parametrize("name", NAMES)
def test_partly_right_notebook_gets_partial_credit(graded, name):
    rows, book = graded[name]
    right = [q for k, q in enumerate(book.questions) if k not in ALIASES[name]]
    assert right and all(rows["partial"].scores[q.name] == q.points for q in right)
    assert 0 < rows["partial"].total < book.possible


@pytest.mark.parametrize("name", NAMES)
def test_reference_aliases_get_no_credit(graded, name):
    rows, book = graded[name]
    assert rows["partial"].error == ""  # the aliases run fine: only the own-work checks refuse them
    assert all(rows["partial"].scores[book.questions[k].name] == 0 for k in ALIASES[name])


def test_broken_submissions_each_get_their_row_with_a_clear_error(built_exercises, tmp_path, capsys):
    built = built_exercises["01_token_embedding"]
    student = nbformat.read(built.student, as_version=4)
    good = with_answers(student, dict(enumerate(solution_answers(built))))
    q1, q2, q3 = answer_cells(good)  # cells 5, 8 and 11 counted from 1

    def variant(edit):
        nb = nbformat.from_dict(nbformat.reads(nbformat.writes(good), as_version=4))
        edit(nb)
        return nb

    def insert(source):
        return variant(lambda nb: nb.cells.insert(3, new_code_cell(source)))  # becomes cell 4

    nbformat.write(good, tmp_path / "good.ipynb")
    notebooks = {  # the loop first, so its time limit runs while the other worker grades the rest; it sleeps,
        "loop": insert("import time\nwhile True:\n    time.sleep(0.1)"),  # leaving that worker the CPU
        "syntax": variant(lambda nb: setattr(nb.cells[q2], "source", "class TokenEmbedding(nn.Module:\n    pass")),
        "exception": variant(lambda nb: setattr(nb.cells[q3], "source",
                                                "raise RuntimeError('broken on purpose')\n" + nb.cells[q3].source)),
        "sysexit": insert("import sys\nsys.exit(3)"),
        "dead": insert("import os\nos._exit(1)"),
        "deleted": variant(lambda nb: nb.cells.pop(q2)),
        "renamed": variant(lambda nb: setattr(nb.cells[q2], "source", nb.cells[q2].source.replace(
            "class TokenEmbedding", "class MyEmbedding"))),
        "wrong": nbformat.read(built_exercises["02_scaling"].student, as_version=4),
        "plain": new_notebook(cells=[new_code_cell("x = 1")]),
    }
    paths = []
    for kind, nb in notebooks.items():
        nbformat.write(nb, tmp_path / f"{kind}.ipynb")
        paths.append(tmp_path / f"{kind}.ipynb")
    (tmp_path / "invalid.ipynb").write_text(nbformat.writes(good)[:500])
    with zipfile.ZipFile(tmp_path / "exported.zip", "w") as zf:  # what grader.export() hands in
        zf.write(tmp_path / "good.ipynb", "01_token_embedding.ipynb")
    paths += [tmp_path / "invalid.ipynb", tmp_path / "exported.zip"]
    out = tmp_path / "gradebook.csv"

    code = main(["grade", *map(str, paths), "--out", str(out), "--exercise", "01_token_embedding",
                 "--autograder", str(built.autograder), "--timeout", "40"])
    assert code == 0
    rows = list(csv.DictReader(out.open()))
    assert [r["submission"] for r in rows] == [str(p) for p in paths]
    got = {p.stem: (r["q1"], r["q2"], r["q3"], r["error"]) for p, r in zip(paths, rows)}
    expected = {
        "syntax": ("3", "0", "2", f"cell {q2 + 1}: SyntaxError"),
        "exception": ("3", "4", "0", f"cell {q3 + 1}: RuntimeError: broken on purpose"),
        "loop": ("0", "0", "0", "timed out after 40 s"),
        "sysexit": ("3", "4", "2", "cell 4: SystemExit: 3"),
        "dead": ("0", "0", "0", "the kernel died"),
        "deleted": ("3", "0", "2", "q2: no cell defines `TokenEmbedding` (answer cell deleted or renamed?)"),
        "renamed": ("3", "0", "2", "q2: no cell defines `TokenEmbedding` (answer cell deleted or renamed?)"),
        "wrong": ("0", "0", "0", "wrong exercise: this notebook is for 02_scaling, not 01_token_embedding"),
        "plain": ("0", "0", "0", "not an exercise notebook"),
        "invalid": ("0", "0", "0", "not a notebook: invalid JSON"),
        "exported": ("3", "4", "2", ""),
    }
    for kind, (s1, s2, s3, error) in expected.items():
        assert got[kind][:3] == (s1, s2, s3), (kind, got[kind])
        assert (error in got[kind][3]) if error else got[kind][3] == "", (kind, got[kind])
    summary = capsys.readouterr().out
    assert "01_token_embedding: graded 11 submissions, 10 with errors" in summary
    assert f"{tmp_path / 'loop.ipynb'}: timed out" in summary
