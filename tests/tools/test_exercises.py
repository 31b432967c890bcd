"""The exercises as learners get them: generated from their sources and up to date, 2-4 questions with points,
public checks in the notebook and hidden tests outside it, measurements asked as code, hidden tests that catch
plausible wrong answers, and a site page."""

import re
import shutil

import nbformat
import pytest
import yaml

from course_embed.tools.cli import main
from course_embed.tools.grading import ANSWER_TAG, load_suite, probe

from .grading_cases import EXERCISES, NAMES, ROOT, WRONG_ANSWERS, solution_answers

#: Each exercise's measurement question and the function that measures (graded by running it).
MEASUREMENTS = {
    "01_token_embedding": ("q3", "mean_row_norm"),
    "02_scaling": ("q3", "measured_ratio"),
    "03_sinusoidal": ("q3", "first_rise"),
    "04_fusion": ("q4", "mean_abs_cos"),
    "05_rope_alibi": ("q3", "recent_weight"),
    "06_optimization": ("q3", "sparse_fraction"),
}


def test_every_source_has_its_student_notebook_and_no_other():
    students = sorted(p.stem for p in (ROOT / "exercises").glob("*.ipynb"))
    assert students == NAMES and len(NAMES) >= 4
    assert [n[:2] for n in NAMES] == [f"{i:02d}" for i in range(1, len(NAMES) + 1)]
    assert MEASUREMENTS.keys() == set(NAMES), "add the new exercise's measurement to MEASUREMENTS"


@pytest.mark.parametrize("name", NAMES)
def test_committed_student_notebook_is_not_stale(built_exercises, name):
    committed = (ROOT / "exercises" / f"{name}.ipynb").read_bytes()
    assert committed == built_exercises[name].student.read_bytes(), (
        f"exercises/{name}.ipynb is stale: run course-embed exercises {name}"
    )


def test_staleness_check_fails_on_an_edited_source(tmp_path, capsys):
    root = tmp_path / "exercises"
    (root / "source").mkdir(parents=True)
    for exercise in EXERCISES[:2]:
        shutil.copy(exercise.source, root / "source")
        shutil.copy(exercise.student, root)
    edited = root / "source" / f"{NAMES[1]}.ipynb"
    nb = nbformat.read(edited, as_version=4)
    prompt = next(c for c in nb.cells if c.cell_type == "markdown" and "Question 1" in c.source)
    prompt.source = prompt.source.replace("Question 1", "Question one")
    nbformat.write(nb, edited)
    assert main(["exercises", "--check", "--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert f"{NAMES[0]}.ipynb: up to date" in out and f"{NAMES[1]}.ipynb: stale" in out


@pytest.mark.parametrize("name", NAMES)
def test_questions_have_public_checks_in_the_notebook_and_hidden_tests_outside_it(built_exercises, name):
    built = built_exercises[name]
    suite = load_suite(ROOT / "exercises", name)
    questions = suite.questions
    assert 2 <= len(questions) <= 4 and all(q.points > 0 for q in questions)
    student = nbformat.read(built.student, as_version=4)
    public = student.metadata["otter"]["tests"]
    assert student.metadata["otter"]["assignment_name"] == name
    assert set(public) == {q.name for q in questions}
    for q in questions:
        assert f"check_public('{name}', '{q.name}'" in public[q.name], f"{q.name}'s check must run the public tests"
    hidden = {t.name for t in suite.tests if t.hidden}
    text = built.student.read_text() + (ROOT / "exercises" / "checks" / f"{name}.py").read_text()
    assert hidden and not any(n in text for n in hidden), "a hidden test leaked into what learners get"
    assert "# BEGIN SOLUTION" not in text and "hidden=True" not in text


@pytest.mark.parametrize("name", NAMES)
def test_measurement_questions_ask_for_the_code_that_measures(built_exercises, name):
    question, function = MEASUREMENTS[name]
    suite = load_suite(ROOT / "exercises", name)
    assert {t.answers for t in suite.tests if t.question == question} == {(function,)}
    student = nbformat.read(built_exercises[name].student, as_version=4)
    prompt = next(
        c.source
        for c in student.cells
        if c.cell_type == "markdown" and c.source.startswith(f"**Question {question[1:]} (")
    )
    assert re.search(rf"Write\s+`{function}\(", prompt) and "as code" in prompt
    assert "digest" not in built_exercises[name].student.read_text()


def _solved(built, extra: str = "") -> dict:
    """The namespace of the solved notebook (its code cells in order, answers from the solution, grader cells
    left out), with ``extra`` run last."""
    student = nbformat.read(built.student, as_version=4)
    answers = iter(solution_answers(built))
    sources = [
        next(answers) if ANSWER_TAG in c.metadata.get("tags", []) else c.source
        for c in student.cells
        if c.cell_type == "code" and "grader" not in c.source
    ]
    namespace = {}
    exec("\n\n".join([*sources, extra]), namespace)
    return namespace


WRONG = [
    (name, q, label)
    for name, by_question in WRONG_ANSWERS.items()
    for q, wrong in by_question.items()
    for label in wrong
]


@pytest.mark.parametrize("name, question, label", WRONG, ids=[f"{n[:2]}-{q}-{label}" for n, q, label in WRONG])
def test_plausible_wrong_answers_fail_a_hidden_test(built_exercises, name, question, label):
    tests = [t for t in load_suite(ROOT / "exercises", name).tests if t.question == question]
    solved = _solved(built_exercises[name])
    assert [probe.check(t, probe.gather(t, solved)) for t in tests] == [(True, "")] * len(tests)
    wrong = _solved(built_exercises[name], WRONG_ANSWERS[name][question][label])
    failed = [t.name for t in tests if t.hidden and not probe.check(t, probe.gather(t, wrong))[0]]
    assert failed, f"{name} {question}: the wrong answer '{label}' passes every hidden test"


def test_site_pages_list_every_exercise_and_the_book_does_not_run_them():
    """The learner's page says how to do an exercise; the instructor's page how to release, grade and limit."""
    page = (ROOT / "book" / "exercises.md").read_text()
    for name in NAMES:
        assert f"exercises/{name}.ipynb" in page, f"book/exercises.md does not list {name}"
    for needle in ('grader.check("q1")', "grader.export", "jupyter lab", "exercises/source", "sandbox"):
        assert needle in page, f"book/exercises.md does not mention {needle}"
    assert "](instructors.md)" in page and "## For instructors" in page
    instructors = (ROOT / "book" / "instructors.md").read_text()
    for needle in (
        "course-embed grade",
        "course-embed release",
        "course-embed exercises",
        "exercises/source",
        "sandbox",
    ):
        assert needle in instructors, f"book/instructors.md does not mention {needle}"
    for option in ("--timeout", "--memory", "--file-size", "--disk", "--processes", "--cpu-time"):
        assert f"`{option}`" in instructors, f"book/instructors.md does not document course-embed grade {option}"
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    assert files.index("book/instructors") == files.index("book/exercises") + 1
    assert not any(f.startswith("exercises/") for f in files)
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'norecursedirs = \[[^\]]*"exercises"', pyproject), "nbval must not collect the exercises"
