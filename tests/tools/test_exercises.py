"""The exercises as learners get them: generated from their sources and up to date, 2-4 questions with points,
public and hidden tests, measurement checks that do not give the answer away, and a site page that lists them."""

import math
import re
import shutil

import nbformat
import pytest
import torch
import yaml
from otter.test_files import ExceptionTestFile

import course_embed as ce
from course_embed.lab.bench import tensor_bytes
from course_embed.lab.token_embedding import row_norms
from course_embed.tools.cli import main
from course_embed.tools.grading import answer_digest, check_measurement, read_questions

from .grading_cases import EXERCISES, NAMES, ROOT, built_exercises  # noqa: F401


def _embedding_seed0() -> torch.Tensor:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return torch.nn.Embedding(1000, 512).weight.detach().double()


def _first_rise() -> int:
    table = ce.sinusoidal_table(400, 64, dtype=torch.float64)
    dots = table @ table[0]
    return next(k for k in range(1, 400) if dots[k] > dots[k - 1])


def _sparse_fraction() -> float:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        ids = torch.randint(0, 32000, (8, 256))
    weight = torch.zeros(32000, 512, requires_grad=True)
    torch.nn.functional.embedding(ids, weight, sparse=True).sum().backward()
    return tensor_bytes(weight.grad.coalesce()) / tensor_bytes(weight.detach())


#: Each exercise's measurement question: (question, variable, decimals of the public check, reference value).
MEASUREMENTS = {
    "01_token_embedding": ("q3", "mean_row_norm", 2, lambda: row_norms(_embedding_seed0()).mean().item()),
    "02_scaling": ("q3", "measured_ratio", 3, lambda: row_norms(_embedding_seed0()).mean().item() * math.sqrt(512)
                   / row_norms(ce.sinusoidal_table(1000, 512)).mean().item()),
    "03_sinusoidal": ("q3", "first_rise", 0, _first_rise),
    "04_fusion": ("q4", "mean_abs_cos", 4, lambda: torch.nn.functional.cosine_similarity(
        _embedding_seed0()[:100], ce.sinusoidal_table(100, 512, dtype=torch.float64), dim=-1).abs().mean().item()),
    "05_rope_alibi": ("q3", "recent_weight", 4, lambda: torch.softmax(
        ce.alibi_bias(ce.alibi_slopes(8, dtype=torch.float64), 128), dim=-1)[3, 0, -16:].sum().item()),
    "06_optimization": ("q3", "sparse_fraction", 4, _sparse_fraction),
}


def test_every_source_has_its_student_notebook_and_no_other():
    students = sorted(p.stem for p in (ROOT / "exercises").glob("*.ipynb"))
    assert students == NAMES and len(NAMES) >= 4
    assert [n[:2] for n in NAMES] == [f"{i:02d}" for i in range(1, len(NAMES) + 1)]
    assert MEASUREMENTS.keys() == set(NAMES), "add the new exercise's measurement to MEASUREMENTS"


@pytest.mark.parametrize("name", NAMES)
def test_committed_student_notebook_is_not_stale(built_exercises, name):
    committed = (ROOT / "exercises" / f"{name}.ipynb").read_bytes()
    assert committed == built_exercises[name].student.read_bytes(), \
        f"exercises/{name}.ipynb is stale: run course-embed exercises {name}"


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
def test_questions_have_points_public_and_hidden_tests(built_exercises, name):
    built = built_exercises[name]
    questions = read_questions(built.autograder)
    assert 2 <= len(questions) <= 4 and all(q.points > 0 for q in questions)
    assert MEASUREMENTS[name][0] in {q.name for q in questions}
    student = nbformat.read(built.student, as_version=4)
    public = student.metadata["otter"]["tests"]
    assert student.metadata["otter"]["assignment_name"] == name
    assert set(public) == {q.name for q in questions}
    solution = nbformat.read(built.solution, as_version=4).metadata["otter"]["tests"]
    for q in questions:
        cases = ExceptionTestFile.from_string(solution[q.name], path=q.name).test_cases
        assert any(c.hidden for c in cases) and any(not c.hidden for c in cases), f"{q.name} needs both kinds"
        hidden_names = {c.body.test_func.__name__ for c in cases if c.hidden}
        assert not any(n in public[q.name] for n in hidden_names), f"a hidden test of {q.name} leaked"
    text = built.student.read_text()
    assert "# BEGIN SOLUTION" not in text and "hidden: true" not in text


@pytest.mark.parametrize("name", NAMES)
def test_measurement_check_matches_the_reference_without_revealing_it(built_exercises, name):
    question, variable, decimals, reference = MEASUREMENTS[name]
    value = reference()
    salt = f"{name}/{question}"
    text = built_exercises[name].student.read_text()
    public = nbformat.read(built_exercises[name].student, as_version=4).metadata["otter"]["tests"][question]
    quote = "[\"']"  # otter rewrites the test source with ast.unparse, which prefers single quotes
    digests = re.findall(rf"check_measurement\({quote}{variable}{quote}, {variable}, {quote}([0-9a-f]{{64}}){quote}, "
                         rf"decimals={decimals}, salt={quote}{re.escape(salt)}{quote}\)", public)
    assert digests == [answer_digest(value, decimals, salt)], "the public check's digest is not the reference's"
    check_measurement(variable, value, digests[0], decimals=decimals, salt=salt)
    if isinstance(value, int):
        assert not re.search(rf"\b{value}\b", public), "the public test shows the answer"
    else:
        for places in range(max(1, decimals - 1), decimals + 3):
            assert f"{value:.{places}f}" not in text, f"the student notebook shows the answer ({places} places)"
        with pytest.raises(AssertionError):
            check_measurement(variable, value + 3 * 10.0 ** -decimals, digests[0], decimals=decimals, salt=salt)


def test_site_page_lists_every_exercise_and_the_book_does_not_run_them():
    page = (ROOT / "book" / "exercises.md").read_text()
    for name in NAMES:
        assert f"exercises/{name}.ipynb" in page, f"book/exercises.md does not list {name}"
    for needle in ('grader.check("q1")', "course-embed grade", "grader.export", "jupyter lab"):
        assert needle in page
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    assert "book/exercises" in files and not any(f.startswith("exercises/") for f in files)
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'norecursedirs = \[[^\]]*"exercises"', pyproject), "nbval must not collect the exercises"
