"""The exercises as learners get them: generated from their sources and up to date, 2-6 questions with points,
public checks in the notebook and hidden tests outside it, measurements asked as code, hidden tests that catch
plausible wrong answers, and a site page."""

import re
import shutil

import nbformat
import pytest
import torch
import yaml

from course_embed.tools.cli import main
from course_embed.tools.grading import ANSWER_TAG, load_suite, probe

from .grading_cases import (
    _SPACING,
    EXERCISES,
    NAMES,
    ROOT,
    WRONG_ANSWERS,
    _kept,
    _partial_rope,
    _roberta,
    _step_bytes,
    _tied,
    _timing,
    _truncated,
    _truncated_redrawn,
    solution_answers,
)

SEED = 20260101  # a grading run's secret, fixed here


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
    assert 2 <= len(questions) <= 6 and all(q.points > 0 for q in questions)
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


@pytest.mark.parametrize("name", NAMES[:1] + NAMES[-1:])
def test_the_export_cell_replaces_its_own_zip_and_holds_only_its_exercise(built_exercises, name, tmp_path, monkeypatch):
    """A learner's folder with two exercises and otter's check log of both: running the export cell twice leaves
    one zip, named after the exercise, holding its notebook only (no log of the other exercise's checks)."""
    import zipfile

    import otter.check.notebook as otter_notebook

    other = NAMES[1] if name != NAMES[1] else NAMES[0]
    for exercise in (name, other):
        shutil.copy(built_exercises[exercise].student, tmp_path / f"{exercise}.ipynb")
    (tmp_path / ".OTTER_LOG").write_bytes(b"the checks of every exercise run in this folder")
    student = nbformat.read(tmp_path / f"{name}.ipynb", as_version=4)
    init = next(c.source for c in student.cells if c.cell_type == "code" and "otter.Notebook" in c.source)
    export = next(c.source for c in student.cells if c.cell_type == "code" and "grader.export" in c.source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(otter_notebook, "grade_zip_file", lambda *a, **k: type("R", (), {"summary": lambda s: ""})())
    namespace = {}
    exec(init, namespace)
    for _ in range(2):
        exec(export, namespace)
    zips = sorted(p.name for p in tmp_path.glob("*.zip"))
    assert zips == [f"{name}.zip"], f"running the export cell twice left {zips}"
    with zipfile.ZipFile(tmp_path / f"{name}.zip") as zf:
        names = [n for n in zf.namelist() if n != otter_notebook._ZIP_NAME_FILENAME]  # the zip's own name, otter's
    assert names == [f"{name}.ipynb"], f"the export of {name} holds {names}"


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
    assert [probe.check(t, probe.gather(t, solved, SEED), SEED) for t in tests] == [(True, "")] * len(tests)
    wrong = _solved(built_exercises[name], WRONG_ANSWERS[name][question][label])
    failed = [t.name for t in tests if t.hidden and not probe.check(t, probe.gather(t, wrong, SEED), SEED)[0]]
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


# --- public feedback for the mistakes learners make, and credit only for real answers ----------------------------


def _source_namespace(name: str, extra: str = "") -> dict:
    """The namespace of exercise ``name`` run from its source: the solutions, without the test and config cells,
    ``extra`` last."""
    nb = nbformat.read(ROOT / "exercises" / "source" / f"{name}.ipynb", as_version=4)
    cells, in_tests = [], False
    for cell in nb.cells:
        text = cell.source.strip()
        if cell.cell_type == "raw":
            in_tests = {"# BEGIN TESTS": True, "# END TESTS": False}.get(text, in_tests)
            continue
        if cell.cell_type == "code" and not in_tests:
            cells.append(cell.source)
    namespace = {}
    exec("\n\n".join([*cells, extra]), namespace)
    return namespace


#: Mistakes learners make and the public feedback each must get: code run after the solutions (replacing one
#: answer), a piece of the one sentence the question's public check must show, and (optionally) pieces it must not
#: show because they name a cause that is not the mistake.
PUBLIC_MISTAKES = {
    "01_token_embedding": {
        "q1": {
            "std 1/d (N(0, 1/d) read as the std)": (
                "def init_embedding_(weight, padding_idx=None):\n"
                "    with torch.no_grad():\n"
                "        weight.normal_(0.0, 1 / weight.shape[1])\n"
                "        if padding_idx is not None:\n"
                "            weight[padding_idx].zero_()\n"
                "    return weight",
                "the rows' std is {0.015..0.0163}, expected d_model ** -0.5 = 0.1250",  # 1 / d = 0.0156,
            ),
            "uniform samples with the right std": (
                "def init_embedding_(weight, padding_idx=None):\n"
                "    a = 3 ** 0.5 * weight.shape[1] ** -0.5\n"
                "    with torch.no_grad():\n"
                "        weight.uniform_(-a, a)\n"
                "        if padding_idx is not None:\n"
                "            weight[padding_idx].zero_()\n"
                "    return weight",
                "of the samples lie within one std, a normal has 0.683: sample N(0, 1/d) with normal_",
            ),
            "std from the vocabulary size": (
                "def init_embedding_(weight, padding_idx=None):\n"
                "    with torch.no_grad():\n"
                "        weight.normal_(0.0, weight.shape[0] ** -0.5)\n"
                "        if padding_idx is not None:\n"
                "            weight[padding_idx].zero_()\n"
                "    return weight",
                "is vocab_size ** -0.5: d_model is weight.shape[1]",
                "variance",
            ),
            "Xavier's uniform init (the tutorial's)": (
                "def init_embedding_(weight, padding_idx=None):\n"
                "    with torch.no_grad():\n"
                "        nn.init.xavier_uniform_(weight)\n"
                "        if padding_idx is not None:\n"
                "            weight[padding_idx].zero_()\n"
                "    return weight",
                "N(0, 1/d_model) depends on the width only (not Xavier's fan-in and fan-out)",
                "variance",
            ),
            "a new tensor instead of in place": (
                "def init_embedding_(weight, padding_idx=None):\n"
                "    return torch.randn_like(weight) * weight.shape[1] ** -0.5",
                "left the Parameter unchanged: fill `weight` itself, in place",
            ),
        },
        "q2": {
            "plain indexing: the pad row gets a gradient": (
                "_Solved = TokenEmbedding\n"
                "class TokenEmbedding(_Solved):\n"
                "    def forward(self, ids):\n"
                "        super().forward(ids)\n"
                "        return self.weight[ids] * math.sqrt(self.weight.shape[1])",
                "row 0 (the pad) received a gradient: pass padding_idx to F.embedding",
            ),
            "TypeError only, ranges left to F.embedding": (
                "_Solved = TokenEmbedding\n"
                "class TokenEmbedding(_Solved):\n"
                "    def forward(self, ids):\n"
                "        if ids.dtype not in (torch.int64, torch.int32):\n"
                "            raise TypeError('ids must be integers')\n"
                "        return F.embedding(ids, self.weight, self.padding_idx) * math.sqrt(self.weight.shape[1])",
                "TokenEmbedding(10, 4)([[3, -1]]) (a negative id: plain indexing would wrap -1 to the last row) "
                "raised IndexError",
            ),
            "no constructor check for padding_idx": (
                "_Solved = TokenEmbedding\n"
                "class TokenEmbedding(_Solved):\n"
                "    def __init__(self, vocab_size, d_model, padding_idx=None):\n"
                "        nn.Module.__init__(self)\n"
                "        self.padding_idx = padding_idx\n"
                "        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))\n"
                "        init_embedding_(self.weight, padding_idx)",
                "TokenEmbedding(10, 4, padding_idx=10) (a pad id outside [0, vocab_size): check it in __init__) "
                "raised IndexError",
            ),
            "a negative padding_idx accepted (as nn.Embedding does)": (
                "_Solved = TokenEmbedding\n"
                "class TokenEmbedding(_Solved):\n"
                "    def __init__(self, vocab_size, d_model, padding_idx=None):\n"
                "        if padding_idx is not None and padding_idx < 0:\n"
                "            padding_idx += vocab_size\n"
                "        super().__init__(vocab_size, d_model, padding_idx)",
                "TokenEmbedding(10, 4, padding_idx=-1) (a negative pad id: nn.Embedding reads -1 as the last row, "
                "the question asks for [0, vocab_size): check padding_idx >= 0 in __init__) must raise ValueError, "
                "but it returned a value of type TokenEmbedding",
            ),
            "scaled by d instead of sqrt(d)": (
                "_Solved = TokenEmbedding\n"
                "class TokenEmbedding(_Solved):\n"
                "    def forward(self, ids):\n"
                "        return super().forward(ids) * math.sqrt(self.weight.shape[1])",
                "must return weight[ids] * sqrt(8): the lookup, then the sqrt(d_model) scale",
                "share one table",
            ),
            "a plain tensor for the weight": (
                "_Solved = TokenEmbedding\n"
                "class TokenEmbedding(_Solved):\n"
                "    def __init__(self, vocab_size, d_model, padding_idx=None):\n"
                "        super().__init__(vocab_size, d_model, padding_idx)\n"
                "        w = self.weight.detach().clone().requires_grad_()\n"
                "        del self.weight\n"
                "        self.weight = w",
                "TokenEmbedding(10, 8, padding_idx=0).weight is a plain tensor: make it an nn.Parameter",
            ),
            "one table shared by every module": (
                "_TABLE = nn.Parameter(torch.zeros(10, 8))\n"
                "_Solved = TokenEmbedding\n"
                "class TokenEmbedding(_Solved):\n"
                "    def __init__(self, vocab_size, d_model, padding_idx=None):\n"
                "        super().__init__(vocab_size, d_model, padding_idx)\n"
                "        if (vocab_size, d_model) == (10, 8):\n"
                "            self.weight = _TABLE",
                "two TokenEmbedding(10, 8) modules share one table",
            ),
        },
        "q3": {
            "the default init read as N(0, 1/d)": (
                "def mean_row_norm(seed):\n"
                "    torch.manual_seed(seed)\n"
                "    return (torch.randn(1000, 512) / 512 ** 0.5).norm(dim=1).mean().item()",
                "mean_row_norm(1) is {0.99..1.01}, expected 22.65 to 2 decimals",
            ),
        },
        "q4": {
            "nn.init.trunc_normal_'s default bounds, +-2 (absolute)": (
                _truncated(fill="nn.init.trunc_normal_(weight, std=std)"),
                "outside [-0.04, 0.04] = +-cutoff * std: every sample beyond cutoff standard deviations is re-drawn "
                "(if you used nn.init.trunc_normal_, its a and b are absolute bounds, not multiples of std)",
            ),
            "the tails clamped onto the bounds": (
                _truncated(fill="weight.normal_(0.0, std).clamp_(-cutoff * std, cutoff * std)"),
                "of the values sit on the bounds +-0.04: clamping piles the normal's tails there",
            ),
            "truncated, then rescaled to std": (
                _truncated(after="weight.mul_(std / weight.std())"),
                "truncated values rescaled to std 0.02; the truncated normal keeps its narrower std, 0.01759",
                "absolute bounds",
            ),
            "the pad row zeroed before the init": (
                _truncated(pad_first=True),
                "row 0 is not zero; zero row padding_idx after the random init",
            ),
            "float64 table re-drawn with default-dtype randn": (
                _truncated_redrawn(),
                "on a (200, 16) float64 Parameter: the Parameter must keep its dtype torch.float64, got torch.float32",
            ),
            "weight.data = samples (new storage, not in place)": (
                _truncated_redrawn(", dtype=weight.dtype"),
                "on a (4000, 64) float32 Parameter: the values went into new storage, not the Parameter's own",
            ),
            "the std argument returned, not measured": (
                "def truncated_std(std, cutoff, seed):\n    return float(std)",
                "truncated_std(0.02, 2.0, 1) is 0.02000, the std of the normal before truncation",
            ),
        },
    },
    "02_scaling": {
        "q1": {
            "Xavier's sigma taken as a (the /sqrt(3) forgotten)": (
                "_solved = expected_norm_ratio\n"
                "def expected_norm_ratio(init, vocab_size, d_model, scale=True):\n"
                "    ratio = _solved(init, vocab_size, d_model, scale)\n"
                "    return ratio * math.sqrt(3) if init == 'xavier_uniform' else ratio",
                "U(-a, a) has sigma = a / sqrt(3), not a",
            ),
            "a PE row's norm taken as sqrt(d)": (
                "_solved = expected_norm_ratio\n"
                "def expected_norm_ratio(init, vocab_size, d_model, scale=True):\n"
                "    return _solved(init, vocab_size, d_model, scale) / math.sqrt(2)",
                "a PE row's norm is sqrt(d / 2) (d / 2 pairs with sin^2 + cos^2 = 1)",
            ),
        },
        "q2": {
            "the values copied, as chapter 1's control does": (
                "def tie(embedding, output):\n"
                "    if output.weight.shape != embedding.weight.shape:\n"
                "        raise ValueError(f'{tuple(output.weight.shape)} != {tuple(embedding.weight.shape)}')\n"
                "    with torch.no_grad():\n"
                "        output.weight.copy_(embedding.weight)\n"
                "    return output",
                "it holds a copy; assign the Parameter itself (output.weight = embedding.weight)",
            ),
            "no check of the shapes": (
                "def tie(embedding, output):\n    output.weight = embedding.weight\n    return output",
                "tie(nn.Embedding(11, 4), nn.Linear(11, 4)) (weight (4, 11): the wrong way round) must raise "
                "ValueError, but it returned a value of type Linear",
            ),
            "two Parameters sharing one storage (.data)": (
                "def tie(embedding, output):\n"
                "    if output.weight.shape != embedding.weight.shape:\n"
                "        raise ValueError(f'{tuple(output.weight.shape)} != {tuple(embedding.weight.shape)}')\n"
                "    output.weight.data = embedding.weight.data\n"
                "    return output",
                "the two layers hold two Parameters that share their values (.data), so each gets its own gradient",
            ),
            "an error that names no shape": (
                "def tie(embedding, output):\n"
                "    if output.weight.shape != embedding.weight.shape:\n"
                "        raise ValueError('the shapes differ')\n"
                "    output.weight = embedding.weight\n"
                "    return output",
                "must name both shapes, (11, 4) and (4, 11): got 'the shapes differ'",
            ),
        },
        "q3": {
            "the package's table, as chapter 2's cells do": (
                "def measured_ratio(seed):\n"
                "    torch.manual_seed(seed)\n"
                "    table = nn.Embedding(1000, 512).weight.detach() * math.sqrt(512)\n"
                "    return (table.norm(dim=1).mean() / ce.sinusoidal_table(1000, 512).norm(dim=1).mean()).item()",
                "measured_ratio(1): it calls course_embed's sinusoidal.sinusoidal_table",
            ),
        },
        "q4": {
            "the logits' std as sigma (the norm of h left out)": (
                _tied(std="sigma * output_scale"),
                "is 0.03125 = sigma: a logit h . w sums d products, and h leaves a LayerNorm with norm sqrt(d)",
            ),
            "the input factor sqrt(d) put on the head too": (
                _tied(std="sigma * d_model * output_scale"),
                "is 32 = sigma * d: the input factor sqrt(d) multiplies the looked-up rows only",
            ),
            "T5's output scale ignored": (
                _tied(std="sigma * math.sqrt(d_model)"),
                "(T5-base's tied head) is 27.7128, expected 1: output_scale multiplies h before the head",
            ),
            "Xavier's sigma taken as a": (
                _tied(
                    std="sigma * math.sqrt(d_model) * output_scale * (math.sqrt(3) if init == 'xavier_uniform' else 1)"
                ),
                "U(-a, a) has sigma = a / sqrt(3), not a",
            ),
            "a number as init refused": (
                _tied(numbers=False),
                "tied_logit_std(0.02, 256000, 2048) (a number as init: the std of a normal init) raised ValueError",
            ),
            "an error that does not name the value": (
                "_solved = tied_logit_std\n"
                "def tied_logit_std(init, vocab_size, d_model, output_scale=1.0):\n"
                "    try:\n"
                "        return _solved(init, vocab_size, d_model, output_scale)\n"
                "    except ValueError:\n"
                "        raise ValueError('unknown init') from None",
                "must name the argument init and the value given ('kaiming'): got 'unknown init'",
            ),
            "the loss as log V + s / 2 (right at s = 1 only)": (
                _tied(loss="math.log(vocab_size) + logit_std / 2"),
                "is log V + s / 2 = 10.9198: that agrees with log V + 1/2 only at s = 1",
            ),
            "the loss as log V + s^2": (
                _tied(loss="math.log(vocab_size) + logit_std ** 2"),
                "is log V + s^2 = 15.9078: E[exp(z)] for z ~ N(0, s^2) is exp(s^2 / 2)",
            ),
            "the loss as the uniform guess": (
                _tied(loss="math.log(vocab_size)"),
                "initial_loss(1.0, 32000) is log V = 10.373491, the uniform guess",
            ),
            "the loss in bits": (
                _tied(loss="math.log2(vocab_size) + logit_std ** 2 / 2"),
                "expected log(10) = 2.302585: equal logits give the uniform guess, log V in nats",
            ),
        },
    },
    "03_sinusoidal": {
        "q1": {
            "the tutorial table (d2l, the Annotated Transformer): float32 angles": (
                "def sinusoidal(length, d_model, base=10000.0):\n"
                "    if d_model % 2:\n"
                "        raise ValueError('odd d_model')\n"
                "    position = torch.arange(length).unsqueeze(1)\n"
                "    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(base) / d_model))\n"
                "    pe = torch.zeros(length, d_model)\n"
                "    pe[:, 0::2] = torch.sin(position * div_term)\n"
                "    pe[:, 1::2] = torch.cos(position * div_term)\n"
                "    return pe",
                "sinusoidal(10001, 64)[10000] is off by {2e-6..1e-3} (a float32 table rounds by about 6e-8): compute "
                "positions, omega and the angles in float64",
            ),
            "[sin | cos] halves": (
                "_solved = sinusoidal\n"
                "def sinusoidal(length, d_model, base=10000.0):\n"
                "    table = _solved(length, d_model, base)\n"
                "    return torch.cat([table[:, 0::2], table[:, 1::2]], dim=1)",
                "holds the sines in columns 0-1 and the cosines in 2-3 ([sin | cos] halves): interleave them",
                "omega_i = base",
            ),
            "the Tensor2Tensor spacing log(base) / (d / 2 - 1)": (
                "def sinusoidal(length, d_model, base=10000.0):\n"
                "    if d_model % 2:\n"
                "        raise ValueError('odd d_model')\n"
                "    position = torch.arange(length, dtype=torch.float64)[:, None]\n"
                "    step = math.log(base) / (d_model / 2 - 1)\n"
                "    angles = position * torch.exp(-torch.arange(d_model // 2, dtype=torch.float64) * step)\n"
                "    return torch.stack([angles.sin(), angles.cos()], -1).flatten(-2).float()",
                "sinusoidal(3, 6, 100.0) uses the Tensor2Tensor spacing omega_i = base ** (-i / (d / 2 - 1))",
                "is the table for base 10000",
            ),
            "the base hard-coded to 10000": (
                "_solved = sinusoidal\n"
                "def sinusoidal(length, d_model, base=10000.0):\n"
                "    return _solved(length, d_model)",
                "sinusoidal(3, 6, 100.0) is the table for base 10000: omega_i = base ** (-2i / d) with the base "
                "argument",
            ),
        },
        "q2": {
            "the textbook rotation [[c, -s], [s, c]]": (
                "_solved = rotation\ndef rotation(k, d_model, base=10000.0):\n    return _solved(k, d_model, base).T",
                "rotation(3, 8) @ PE[0] must equal PE[3], and its transpose does",
                "omega",
            ),
            "the Tensor2Tensor spacing log(base) / (d / 2 - 1)": (
                "def rotation(k, d_model, base=10000.0):\n"
                "    if d_model % 2:\n"
                "        raise ValueError('odd d_model')\n"
                "    step = math.log(base) / (d_model / 2 - 1)\n"
                "    angles = k * torch.exp(-torch.arange(d_model // 2, dtype=torch.float64) * step)\n"
                "    m = torch.zeros(d_model, d_model, dtype=torch.float64)\n"
                "    i = torch.arange(0, d_model, 2)\n"
                "    m[i, i], m[i, i + 1] = angles.cos(), angles.sin()\n"
                "    m[i + 1, i], m[i + 1, i + 1] = -angles.sin(), angles.cos()\n"
                "    return m",
                "rotation(3, 6, 100.0) uses the Tensor2Tensor spacing omega_i = base ** (-i / (d / 2 - 1))",
                "is M_3 for base 10000",
            ),
            "the base hard-coded to 10000": (
                "_solved = rotation\ndef rotation(k, d_model, base=10000.0):\n    return _solved(k, d_model)",
                "rotation(3, 6, 100.0) is M_3 for base 10000: omega_i = base ** (-2i / d) with the base argument",
            ),
            "float32 angles, a float64 matrix": (
                "def rotation(k, d_model, base=10000.0):\n"
                "    if d_model % 2:\n"
                "        raise ValueError('odd d_model')\n"
                "    angles = (k * base ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)).double()\n"
                "    m = torch.zeros(d_model, d_model, dtype=torch.float64)\n"
                "    i = torch.arange(0, d_model, 2)\n"
                "    m[i, i], m[i, i + 1] = angles.cos(), angles.sin()\n"
                "    m[i + 1, i], m[i + 1, i + 1] = -angles.sin(), angles.cos()\n"
                "    return m",
                "rotation(12345.5, 8) is off from M_k by up to {1e-6..1e-3} (float64 rounds to about 1e-12): compute "
                "omega and the angles k * omega in float64",
            ),
        },
        "q3": {
            "the index of the difference, one short": (
                "def first_rise(d_model):\n"
                "    table = sinusoidal(1000, d_model).double()\n"
                "    return int(torch.nonzero((table @ table[0]).diff() > 0)[0])",
                "first_rise(16) is 3, expected 4",
            ),
        },
        "q4": {
            "the paper's spacing base ** (-2i / d)": (
                _timing(step="n"),
                "timing_signal(3, 8, 100.0) uses the paper's frequencies omega_i = base ** (-2i / d): here omega_i = "
                "base ** (-i / (n - 1))",
                "float64",
            ),
            "interleaved columns (the paper's layout)": (
                _timing(layout="torch.stack((sin, cos), dim=-1).flatten(1)"),
                "timing_signal(3, 8, 100.0) interleaves the columns (sin, cos of pair 0, then of pair 1, ...)",
                "float64",
                "start + j",
            ),
            "the cosines first": (
                _timing(layout="torch.cat((cos, sin), dim=1)"),
                "timing_signal(3, 8, 100.0) puts the cosines first",
                "float64",
            ),
            "the base hard-coded to 10000": (
                "_solved = timing_signal\n"
                "def timing_signal(length, d_model, base=10000.0, start=0):\n"
                "    return _solved(length, d_model, start=start)",
                "timing_signal(3, 8, 100.0) is the table for base 10000",
            ),
            "float32 angles": (
                _timing(angles="float32"),
                "timing_signal(10001, 64)[10000] is off by {2e-6..1e-2} (a float32 table rounds by about 6e-8): "
                "compute the positions, omega and the angles in float64",
            ),
            "start ignored": (
                _timing(first="0"),
                "timing_signal(2, 8, 100.0, start=5) is rows 0 and 1, positions 0 and 1: row j holds position "
                "start + j",
                "float64",
            ),
            "no error for d_model = 2 (one pair)": (
                _timing(check=""),
                "timing_signal(5, 2) (a single pair: the step divides by n - 1 = 0) must raise ValueError, but it "
                "returned a tensor of shape (5, 2)",
            ),
        },
    },
    "04_fusion": {
        "q1": {
            "float32 angles": (
                "def sinusoidal_rows(start, length, d_model, base=10000.0):\n"
                "    positions = torch.arange(start, start + length, dtype=torch.float32)[:, None]\n"
                "    angles = positions * base ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)\n"
                "    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2).double()",
                "PE row 600 is off by {1e-9..1e-3} in float64: compute the angles in float64",
            ),
            "sqrt(d) as a float32 tensor (common seq2seq tutorials)": (
                "_Solved = AddFusion\n"
                "class AddFusion(_Solved):\n"
                "    def forward(self, ids, offset=0):\n"
                "        h = self.token(ids) * torch.sqrt(torch.tensor(float(self.d_model)))\n"
                "        return h + sinusoidal_rows(offset, ids.shape[1], self.d_model).to(h.dtype)",
                "PE row 600 is exact but token 699's output is off by {1e-9..1e-5} in float64: the sqrt(d_model) "
                "scale is rounded",
                "compute the angles in float64",
            ),
            "the offset ignored": (
                "_Solved = AddFusion\n"
                "class AddFusion(_Solved):\n"
                "    def forward(self, ids, offset=0):\n"
                "        return super().forward(ids, 0)",
                "tokens 0 and 699 must get PE rows 600 and 1299 (PE[offset : offset + seq], any length;",
            ),
        },
        "q3": {
            "True = attend (the SDPA convention)": (
                "def key_padding_mask(ids, padding_idx):\n"
                "    if ids.dtype not in (torch.int64, torch.int32):\n"
                "        raise TypeError('ids must be integers')\n"
                "    return ids != padding_idx",
                "is True at the real tokens: nn.MultiheadAttention's key_padding_mask means True = ignore this key",
            ),
        },
        "q5": {
            "every column numbered, pads included": (
                _roberta(
                    "torch.where(ids == padding_idx, padding_idx, torch.arange(ids.shape[1]) + padding_idx + 1 + "
                    "offset)"
                ),
                "numbers every column, pads included: count the real tokens only",
            ),
            "the pads' running count left in place": (
                _roberta("real.cumsum(dim=1) + offset + padding_idx"),
                "gives the pads the count of real tokens before them: every pad gets position padding_idx (1)",
            ),
            "the first real token at padding_idx": (
                _roberta("(real.cumsum(dim=1) - 1 + offset) * real + padding_idx"),
                "starts at padding_idx: the k-th real token is at padding_idx + k",
            ),
            "counted down the batch": (
                _roberta("(real.cumsum(dim=0) + offset) * real + padding_idx"),
                "counts down the batch: count along each sequence (dim 1)",
            ),
            "the offset added to the pads too": (
                _roberta("real.cumsum(dim=1) * real + offset + padding_idx"),
                "roberta_positions([[1, 8, 9], [8, 9, 1]], 1, offset=3) is [[4, 5, 6], [5, 6, 4]]: the pads stay "
                "where they are without an offset (at padding_idx, 1)",
            ),
            "int32 positions (Hugging Face's casts without the final .long())": (
                _roberta("(real.int().cumsum(dim=1).int() + offset) * real.int() + padding_idx"),
                "must return a (3, 5) torch.int64 tensor, got (3, 5) torch.int32",
            ),
            "no error for ids that are not 2-D": (
                _roberta(check=False),
                "roberta_positions(tensor([5, 6, 1]), 1) (1-D ids: batch first, ids.unsqueeze(0)) raised IndexError",
            ),
        },
    },
    "05_rope_alibi": {
        "q1": {
            "the rotate-half layout (pairs i and i + d / 2)": (
                "def rope(x, offset=0, base=10000.0):\n"
                "    if x.dim() != 4 or x.shape[-1] % 2:\n"
                "        raise ValueError('bad shape')\n"
                "    seq, d = x.shape[-2], x.shape[-1]\n"
                "    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)\n"
                "    angles = torch.arange(offset, offset + seq, dtype=torch.float64)[:, None] * theta\n"
                "    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)\n"
                "    x1, x2 = x[..., : d // 2], x[..., d // 2 :]\n"
                "    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)",
                "that is the rotate-half layout (pairs i and i + head_dim / 2); here pair i is dimensions 2i and "
                "2i + 1",
            ),
            "float32 angles": (
                "_solved = rope\n"
                "def rope(x, offset=0, base=10000.0):\n"
                "    seq, d = x.shape[-2], x.shape[-1]\n"
                "    out = _solved(x, offset, base)\n"
                "    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)\n"
                "    angles = (torch.arange(offset, offset + seq, dtype=torch.float32)[:, None] * theta).double()\n"
                "    x1, x2 = x[..., 0::2], x[..., 1::2]\n"
                "    out[..., 0::2] = x1 * angles.cos().to(x.dtype) - x2 * angles.sin().to(x.dtype)\n"
                "    out[..., 1::2] = x1 * angles.sin().to(x.dtype) + x2 * angles.cos().to(x.dtype)\n"
                "    return out",
                "rope(x, offset=3000) in float64 is off by",
            ),
            "the base hard-coded to 10000": (
                "_solved = rope\ndef rope(x, offset=0, base=10000.0):\n    return _solved(x, offset)",
                "rope(x, offset=1, base=100.0) turns the pairs by base 10000's angles",
            ),
            "theta_i = base ** (-i / d) (the 2 forgotten)": (
                "_solved = rope\ndef rope(x, offset=0, base=10000.0):\n    return _solved(x, offset, base ** 0.5)",
                "rope(x, offset=1) on (1, 0, 1, 0, ...) (head_dim 8) must turn pair i by theta_i = base ** (-2i / "
                "head_dim) = 1, 0.1, 0.01, 0.001 radians",
                "offset is the first token's position",
            ),
        },
        "q2": {
            "the power-of-two formula for any n": (
                "def alibi_slopes(num_heads):\n"
                "    if num_heads < 1:\n"
                "        raise ValueError('num_heads')\n"
                "    return torch.tensor([2.0 ** (-8.0 * (i + 1) / num_heads) for i in range(num_heads)])",
                "alibi_slopes(6) must be the 4 slopes for 4 heads (1/4, 1/16, 1/64, 1/256), then the 1st and 3rd",
            ),
        },
        "q5": {
            "the interleaved layout on the rotated dims": (
                _partial_rope(pairs="interleaved"),
                "turned the adjacent dims (0, 1) and (2, 3): that is the interleaved layout",
                "float64",
            ),
            "frequencies over head_dim, not rotary_dim": (
                _partial_rope(width="d"),
                "turned pair 1 by 100 ** (-2 / 8) = 0.316 radians: with partial RoPE the frequencies are theta_i = "
                "base ** (-2i / rotary_dim)",
            ),
            "the whole head rotated (rotary_dim ignored)": (
                _partial_rope(r="d"),
                "dims 4 to 7 (from rotary_dim on) must pass through unchanged as (5, 6, 7, 8)",
            ),
            "float32 angles": (
                _partial_rope(angles="float32"),
                "rope_partial_half(x = ones, 8, offset=3000) (every dim rotates) is off by",
            ),
            "no range check of rotary_dim": (
                _partial_rope(check="False"),
                "rope_partial_half(x of shape (1, 2, 3, 8), 10) (rotary_dim above head_dim) raised IndexError",
            ),
        },
    },
    "06_optimization": {
        "q6": {
            "bfloat16's rounding for float16 weights (the page's code)": (
                _kept("(weight.float() + update).bfloat16() != weight"),
                "the update 0.0006 of a torch.float16 weight 1 is lost in your answer, but kept when the float32 sum "
                "is rounded to torch.float16: float16 keeps 11 significant bits",
            ),
            "a threshold relative to |w|": (
                _kept("update.abs() > weight.float().abs() * (2**-8 if weight.dtype == torch.bfloat16 else 2**-11)"),
                "the spacing is set by the weight's exponent, 2^-7 for every weight in [1, 2), not by |w| itself",
            ),
            "half the spacing above the weight, both ways": (
                _SPACING,
                "below a power of two the spacing halves: the neighbour under 1.0 is 1 - 2^-8",
            ),
            "the update rounded to the weight's format first": (
                _kept("(weight + update.to(weight.dtype)) != weight"),
                "rounded to bfloat16 first, it becomes exactly half a spacing (a tie) and is lost",
            ),
            "lost instead of kept": (
                _kept("(weight.float() + update).to(weight.dtype) == weight"),
                "every entry is the opposite of what it should be: return True where the update is kept",
            ),
            "the fraction kept instead of the mask": (
                _kept("((weight.float() + update).to(weight.dtype) != weight).double().mean().item()"),
                "must return a torch tensor, got float",
            ),
            "a float mask": (
                _kept("((weight.float() + update).to(weight.dtype) != weight).float()"),
                "must return a torch.bool tensor of the weight's shape (9,), got torch.float32",
            ),
            "the weight updated in place": (
                WRONG_ANSWERS["06_optimization"]["q6"]["the weight updated in place"],
                "changed its weight or update: compute the stored sum in a new tensor, leave both unchanged",
            ),
            "no errors for other dtypes and shapes": (
                _kept(checks=False),
                "kept_updates(float32 weights, ...) (not stored in a 16-bit format) must raise TypeError",
            ),
        },
        "q1": {
            "the textbook expression (3 allocations)": (
                "def lookup_add(ids, weight, pe, scale, padding_idx=None):\n"
                "    return F.embedding(ids, weight, padding_idx) * scale + pe",
                "made 3 new (batch, seq, d) tensors (aten.embedding.default, aten.mul.Tensor, aten.add.Tensor); "
                "expected 1",
            ),
            "the table scaled in place": (
                "def lookup_add(ids, weight, pe, scale, padding_idx=None):\n"
                "    with torch.no_grad():\n"
                "        weight.mul_(scale)\n"
                "    return F.embedding(ids, weight, padding_idx).add_(pe)",
                "changed weight: only the lookup's own output may change in place",
            ),
            "a scaled copy of the whole (V, d) table on every call": (
                "def lookup_add(ids, weight, pe, scale, padding_idx=None):\n"
                "    return F.embedding(ids, weight * scale, padding_idx).add_(pe)",
                "made a new (vocab, d) tensor (aten.mul.Tensor): a scaled copy of the whole table on every call",
            ),
            "chapter 6's out= line under autograd": (
                "def lookup_add(ids, weight, pe, scale, padding_idx=None):\n"
                "    out = F.embedding(ids, weight, padding_idx)\n"
                "    return torch.add(pe, out, alpha=scale, out=out)",
                "raised RuntimeError: add(): functions with out=... arguments don't support automatic differentiation",
            ),
        },
        "q5": {
            "the sparse gradient's values without its indices": (
                _step_bytes(index="0"),
                "is 640 bytes, the values alone: a coalesced sparse gradient also stores one int64 index (8 bytes) "
                "per row",
            ),
            "SparseAdam's state as sparse as the gradient": (
                _step_bytes(state="grad"),
                "the gradient is sparse (720 bytes) but SparseAdam's two moments and Adagrad's sum of squares are "
                "dense (1000, 16) tensors",
            ),
            "a tied table's gradient taken as sparse": (
                _step_bytes(dense="not sparse"),
                "a tied output layer's softmax gradient reaches every row",
            ),
            "Adam's state as one moment": (
                _step_bytes(moments='{"sgd": 0, "adagrad": 1, "adam": 1, "sparseadam": 1}'),
                "is 128,000 bytes: Adam keeps two moments (exp_avg and exp_avg_sq)",
            ),
            "no error for the setups the optimizers refuse": (
                _step_bytes(checks=False),
                "(Adam refuses a sparse gradient) must raise ValueError",
            ),
            "Adam refused whenever sparse=True, tied or not": (
                _step_bytes(adam_refuses="sparse"),
                "table_step_bytes(1000, 16, 10, 'adam', sparse=True, tied=True) raised ValueError, expected 192,000: "
                "a tied table's gradient is dense even with sparse=True, so Adam accepts it",
            ),
        },
        "q2": {
            "the pad row stored as a zero row": (
                "def sparse_embedding_grad(ids, grad_out, vocab_size, padding_idx=None):\n"
                "    rows = ids.reshape(-1).long()\n"
                "    values = grad_out.reshape(-1, grad_out.shape[-1]).clone()\n"
                "    if padding_idx is not None:\n"
                "        values[rows == padding_idx] = 0\n"
                "    if ids.dtype not in (torch.int64, torch.int32):\n"
                "        raise TypeError('ids')\n"
                "    if ids.min() < 0 or ids.max() >= vocab_size:\n"
                "        raise ValueError('ids')\n"
                "    return torch.sparse_coo_tensor(rows[None], values, (vocab_size, grad_out.shape[-1])).coalesce()",
                "stores the pad row 0 (a stored zero row): leave padding_idx's entries out",
            ),
            "the dense gradient, then .to_sparse() (one entry per number)": (
                "_solved = sparse_embedding_grad\n"
                "def sparse_embedding_grad(ids, grad_out, vocab_size, padding_idx=None):\n"
                "    return _solved(ids, grad_out, vocab_size, padding_idx).to_dense().to_sparse()",
                "stores single numbers (2 indices per entry): store rows, one index per row, i.e. indices of shape "
                "(1, nnz) and values of shape (nnz, d)",
            ),
            "not coalesced": (
                "def sparse_embedding_grad(ids, grad_out, vocab_size, padding_idx=None):\n"
                "    if ids.dtype not in (torch.int64, torch.int32):\n"
                "        raise TypeError('ids')\n"
                "    if ids.min() < 0 or ids.max() >= vocab_size:\n"
                "        raise ValueError('ids')\n"
                "    rows = ids.reshape(-1).long()\n"
                "    values = grad_out.reshape(-1, grad_out.shape[-1])\n"
                "    keep = rows != padding_idx\n"
                "    return torch.sparse_coo_tensor(rows[keep][None], values[keep], (vocab_size, values.shape[-1]))",
                "is not coalesced (rows [1, 3, 1]): call .coalesce(), one entry per row",
            ),
            "negative ids let through (only ids >= vocab_size checked)": (
                "def sparse_embedding_grad(ids, grad_out, vocab_size, padding_idx=None):\n"
                "    if ids.dtype not in (torch.int64, torch.int32):\n"
                "        raise TypeError('ids')\n"
                "    if ids.max() >= vocab_size:\n"
                "        raise ValueError('ids')\n"
                "    rows, values = ids.reshape(-1).long(), grad_out.reshape(-1, grad_out.shape[-1])\n"
                "    if padding_idx is not None:\n"
                "        rows, values = rows[rows != padding_idx], values[rows != padding_idx]\n"
                "    d = values.shape[-1]\n"
                "    return torch.sparse_coo_tensor(rows[None], values, (vocab_size, d)).coalesce()",
                "sparse_embedding_grad(ids with -1 < 0, ...) raised RuntimeError",
            ),
            "int32 ids refused": (
                "_solved = sparse_embedding_grad\n"
                "def sparse_embedding_grad(ids, grad_out, vocab_size, padding_idx=None):\n"
                "    if ids.dtype != torch.int64:\n"
                "        raise TypeError('ids must be int64')\n"
                "    return _solved(ids, grad_out, vocab_size, padding_idx)",
                "sparse_embedding_grad(int32 ids [[1, 3, 1, 0]], float64 grad_out (1, 4, 2), 5, padding_idx=0) raised "
                "TypeError",
            ),
            "the values cast to float32": (
                "_solved = sparse_embedding_grad\n"
                "def sparse_embedding_grad(ids, grad_out, vocab_size, padding_idx=None):\n"
                "    return _solved(ids, grad_out.float(), vocab_size, padding_idx)",
                "is torch.float32: the gradient keeps grad_out's dtype",
            ),
            "the dense gradient's nonzero rows (.to_sparse(1))": (
                "_solved = sparse_embedding_grad\n"
                "def sparse_embedding_grad(ids, grad_out, vocab_size, padding_idx=None):\n"
                "    return _solved(ids, grad_out, vocab_size, padding_idx).to_dense().to_sparse(1)",
                "row 2 is looked up, so it is stored even though its two gradients cancel to zero",
            ),
        },
        "q3": {
            "something drawn before torch.randint": (
                "_solved = sparse_fraction\n"
                "def sparse_fraction(seed):\n"
                "    torch.manual_seed(seed)\n"
                "    torch.randn(8, 256)\n"
                "    ids = torch.randint(0, 32000, (8, 256))\n"
                "    grad = sparse_embedding_grad(ids, torch.ones(8, 256, 512), 32000)\n"
                "    return (grad.indices().numel() * 8 + grad.values().numel() * 4) / (32000 * 512 * 4)",
                "sparse_fraction(1) is 0.06243, 1990 stored rows where seed 1's ids touch 1991 (0.0625): the bytes are "
                "counted right but other ids were drawn",
            ),
            "a table built before drawing the ids": (
                "def sparse_fraction(seed):\n"
                "    torch.manual_seed(seed)\n"
                "    table = torch.nn.Embedding(32000, 512)\n"
                "    ids = torch.randint(0, 32000, (8, 256))\n"
                "    grad = sparse_embedding_grad(ids, torch.ones(8, 256, 512), 32000)\n"
                "    return (grad.indices().numel() * 8 + grad.values().numel() * 4) / (32000 * 512 * 4)",
                "draw the ids right after torch.manual_seed(seed), before any other random call (no table needs to "
                "be built)",
                "8 bytes per stored index",
            ),
        },
        "q4": {
            "a working set below the sweep takes the last (DRAM) step (bisect)": (
                "import bisect\n"
                "def time_bound(batch, seq, d_model, itemsize, staircase, peak_gflops):\n"
                "    nbytes = min_bytes(batch, seq, d_model, itemsize)\n"
                "    k = bisect.bisect_right([size for size, _ in staircase], nbytes) - 1\n"
                "    memory = nbytes / (staircase[k][1] * 1e9)\n"
                "    compute = 2 * batch * seq * d_model / (peak_gflops * 1e9)\n"
                "    return (compute, 'compute') if compute > memory else (memory, 'memory')",
                "a working set smaller than every swept size takes the first entry",
            ),
            "b * s * d FLOPs (the multiply or the add left out)": (
                "def time_bound(batch, seq, d_model, itemsize, staircase, peak_gflops):\n"
                "    nbytes = min_bytes(batch, seq, d_model, itemsize)\n"
                "    reached = [g for size, g in staircase if size <= nbytes]\n"
                "    memory = nbytes / ((reached[-1] if reached else staircase[0][1]) * 1e9)\n"
                "    compute = batch * seq * d_model / (peak_gflops * 1e9)\n"
                "    return (compute, 'compute') if compute > memory else (memory, 'memory')",
                "b * s * d FLOPs: the layer does 2 * b * s * d (a multiply and an add per output element)",
            ),
            "the sum of the two roofs": (
                "def time_bound(batch, seq, d_model, itemsize, staircase, peak_gflops):\n"
                "    nbytes = min_bytes(batch, seq, d_model, itemsize)\n"
                "    reached = [g for size, g in staircase if size <= nbytes]\n"
                "    memory = nbytes / ((reached[-1] if reached else staircase[0][1]) * 1e9)\n"
                "    compute = 2 * batch * seq * d_model / (peak_gflops * 1e9)\n"
                "    return memory + compute, 'compute' if compute > memory else 'memory'",
                "the bound is the larger of the two roofs, not their sum",
                "has reached the 1 MiB step",
            ),
            "GiB/s for GB/s": (
                "_solved = time_bound\n"
                "def time_bound(b, s, d, itemsize, staircase, peak):\n"
                "    seconds, roof = _solved(b, s, d, itemsize, staircase, peak)\n"
                "    return seconds * 1e9 / 2**30, roof",
                "(and 1 GB/s is 1e9 bytes per second)",
            ),
            "the sweep's fastest step, whatever the working set": (
                "def time_bound(batch, seq, d_model, itemsize, staircase, peak_gflops):\n"
                "    nbytes = min_bytes(batch, seq, d_model, itemsize)\n"
                "    memory = nbytes / (max(g for _, g in staircase) * 1e9)\n"
                "    compute = 2 * batch * seq * d_model / (peak_gflops * 1e9)\n"
                "    return (compute, 'compute') if compute > memory else (memory, 'memory')",
                "at the sweep's fastest rate, 60 GB/s: the rate is the one of the step the working set (25.5 MiB) "
                "has reached",
            ),
            "a strict < at a swept size": (
                "def time_bound(batch, seq, d_model, itemsize, staircase, peak_gflops):\n"
                "    nbytes = min_bytes(batch, seq, d_model, itemsize)\n"
                "    reached = [g for size, g in staircase if size < nbytes]\n"
                "    memory = nbytes / ((reached[-1] if reached else staircase[0][1]) * 1e9)\n"
                "    compute = 2 * batch * seq * d_model / (peak_gflops * 1e9)\n"
                "    return (compute, 'compute') if compute > memory else (memory, 'memory')",
                "a working set exactly equal to a swept size (4,456,448 bytes) has reached that step: compare sizes "
                "with <=, not <",
            ),
        },
    },
}

MISTAKES = [
    (name, q, label)
    for name, by_question in PUBLIC_MISTAKES.items()
    for q, wrong in by_question.items()
    for label in wrong
]


#: A slot ``{lo..hi}`` in an expected message stands for a number the wrong answer computed: its printed digits depend
#: on the CPU's kernels (float32 ``sin`` of a large angle is off by 2.4e-04 on one CPU, 2.0e-04 on another), so the
#: test asserts the range the message implies (beyond the precision bound the check states, below a wrong formula's).
_SLOT = re.compile(r"\{([^{}.]+(?:\.[^{}.]+)?)\.\.([^{}]+)\}")
_NUMBER = r"([-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?)"


def _assert_says(message: str, expected: str):
    """``message`` holds ``expected``, each slot ``{lo..hi}`` matching a printed number in [lo, hi]."""
    pieces = _SLOT.split(expected)  # text, lo, hi, text, lo, hi, ..., text
    found = re.search(_NUMBER.join(re.escape(text) for text in pieces[::3]), message)
    assert found, f"expected {expected!r} in {message!r}"
    for value, lo, hi in zip(found.groups(), pieces[1::3], pieces[2::3], strict=True):
        assert float(lo) <= float(value) <= float(hi), f"{value} outside [{lo}, {hi}] in {message!r}"


@pytest.mark.parametrize("name, question, label", MISTAKES, ids=[f"{n[:2]}-{q}-{label}" for n, q, label in MISTAKES])
def test_public_checks_catch_the_mistakes_learners_make_with_a_message_that_says_why(name, question, label):
    code, expected, *absent = PUBLIC_MISTAKES[name][question][label]
    tests = [t for t in load_suite(ROOT / "exercises", name).tests if t.question == question]
    answers = {a for t in tests for a in t.answers}
    solved = _source_namespace(name)
    probe.check_public(name, question, **{a: solved[a] for a in answers})  # the solution passes
    wrong = _source_namespace(name, code)
    with pytest.raises(probe.Feedback) as failed:
        probe.check_public(name, question, **{a: wrong[a] for a in answers})
    _assert_says(str(failed.value), expected)
    lines = str(failed.value).split("\n")
    assert all(lines), "one sentence per failed test"
    if "halves" in label or "rotate-half" in label:  # a layout bug is not blamed on the angles' precision
        assert not any("float64" in line for line in lines), lines
    for wrong_cause in absent:  # a cause the check did not test is not named
        assert wrong_cause not in str(failed.value), f"{label}: blames {wrong_cause!r}: {failed.value}"


#: Answers that miss one stated requirement, and the points their question then keeps (public and hidden tests
#: together): each test checks the requirement it is named for, so one miss costs that test's points only.
ONE_MISS = {
    "a sparse gradient in .to_sparse()'s layout (one entry per number)": (
        "06_optimization",
        "q2",
        "_solved = sparse_embedding_grad\n"
        "def sparse_embedding_grad(ids, grad_out, vocab_size, padding_idx=None):\n"
        "    return _solved(ids, grad_out, vocab_size, padding_idx).to_dense().to_sparse()",
        1.0,
    ),
    "the initial loss as log V + s / 2": (
        "02_scaling",
        "q4",
        _tied(loss="math.log(vocab_size) + logit_std / 2"),
        2.0,
    ),
    "bfloat16's rounding for float16 weights": (
        "06_optimization",
        "q6",
        _kept("(weight.float() + update).bfloat16() != weight"),
        1.25,
    ),
    "float64 ALiBi slopes": (
        "05_rope_alibi",
        "q2",
        "_solved = alibi_slopes\ndef alibi_slopes(num_heads):\n    return _solved(num_heads).double()",
        2.0,
    ),
    "BERT's init with the pad row zeroed first": ("01_token_embedding", "q4", _truncated(pad_first=True), 2.25),
    "RoBERTa's positions as int32": (
        "04_fusion",
        "q5",
        _roberta("(real.int().cumsum(dim=1).int() + offset) * real.int() + padding_idx"),
        1.5,
    ),
    "float32 angles in Tensor2Tensor's table": ("03_sinusoidal", "q4", _timing(angles="float32"), 2.25),
    "Tensor2Tensor's table from position 0 whatever the start": ("03_sinusoidal", "q4", _timing(first="0"), 2.5),
    "a right mask without the TypeError": (
        "04_fusion",
        "q3",
        "def key_padding_mask(ids, padding_idx):\n    return ids == padding_idx",
        1.5,
    ),
}


@pytest.mark.parametrize("label", ONE_MISS)
def test_one_missed_requirement_costs_only_its_own_points(label):
    name, question, code, kept = ONE_MISS[label]
    tests = [t for t in load_suite(ROOT / "exercises", name).tests if t.question == question]
    wrong = _source_namespace(name, code)
    results = {t.name: probe.check(t, probe.gather(t, wrong, SEED), SEED) for t in tests}
    score = sum(t.points for t in tests if results[t.name][0])
    failed = {n: m for n, (ok, m) in results.items() if not ok}
    assert score == kept, f"{name} {question}, {label}: {score} points kept, expected {kept}; failed: {failed}"


@pytest.mark.parametrize("name", NAMES)
def test_the_solutions_pass_every_test(name):
    suite, solved = load_suite(ROOT / "exercises", name), _source_namespace(name)
    for seed in (SEED, SEED + 1):
        failed = {
            t.name: m for t in suite.tests for ok, m in [probe.check(t, probe.gather(t, solved, seed), seed)] if not ok
        }
        assert not failed, f"{name}: the solution fails {failed}"


class _EchoModule(torch.nn.Module):
    """An answer that implements nothing: a module with a zero table whose forward returns its input."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        sizes = [a for a in args if isinstance(a, int) and not isinstance(a, bool)][:2]
        self.weight = torch.nn.Parameter(torch.zeros(*sizes) if len(sizes) == 2 else torch.zeros(1, 1))
        self.token = self

    def forward(self, x, *args, **kwargs):
        return x


def _echo(*args, **kwargs):
    """An answer function that implements nothing: it returns the first tensor it was sent (else its first
    argument)."""
    return next((a for a in args if isinstance(a, torch.Tensor)), args[0] if args else None)


def _forge(data, how: str):
    """What a cell that replaced ``probe.gather`` could write instead of the real outcome: ``flags`` every bool
    True, ``zeros`` every tensor and number zero (the shapes the question states), ``ValueError``/``TypeError``
    every call raising it."""
    if isinstance(data, list):
        return [_forge(v, how) for v in data]
    if isinstance(data, bool) and how in ("flags", "zeros"):
        return True
    if isinstance(data, (int, float)) and how == "zeros":
        return type(data)(0)
    if not isinstance(data, dict):
        return data
    if data.get("__outcome__") and how in ("ValueError", "TypeError"):
        return {"__outcome__": True, "raised": how, "message": "forged"}
    if data.get("__tensor__") and how == "zeros" and "data" in data:
        return {**data, "data": torch.zeros_like(data["data"])}
    return {k: _forge(v, how) for k, v in data.items()}


@pytest.mark.parametrize("name", NAMES)
def test_forged_outcomes_without_an_answer_score_nothing(name):
    """Every answer left ``...``; the cell replacing the gathering sends what an answer that echoes its inputs
    produces (as is, or with every flag True, or every call raising the error a test may expect), or outcomes of the
    right structure and shapes with every tensor zero and every flag True."""
    suite = load_suite(ROOT / "exercises", name)
    solved = _source_namespace(name)
    echo = {a: _EchoModule if isinstance(solved[a], type) else _echo for t in suite.tests for a in t.answers}
    scored = {}
    for spec in suite.tests:
        echoed, shaped = probe.gather(spec, echo, SEED), probe.gather(spec, solved, SEED)
        forged = {how: _forge(echoed, how) for how in ("flags", "ValueError", "TypeError")}
        for how, outcome in {"echo": echoed, **forged, "zeros": _forge(shaped, "zeros")}.items():
            if probe.check(spec, outcome, SEED)[0]:
                scored.setdefault(how, []).append(f"{spec.question} {spec.name}")
    assert not scored, f"{name}: forged outcomes earn credit: {scored}"


def _recorded(answer, table: dict):
    """``answer`` wrapped to record each output by its inputs (a learner collecting one grading run's inputs)."""

    def key(args, kwargs):
        return repr([(a.dtype, a.shape, a.tolist()) if isinstance(a, torch.Tensor) else a for a in args]) + repr(
            sorted(kwargs.items())
        )

    def record(*args, **kwargs):
        table[key(args, kwargs)] = answer(*args, **kwargs)
        return table[key(args, kwargs)]

    def replay(*args, **kwargs):
        return table[key(args, kwargs)]

    return record, replay


@pytest.mark.parametrize("name", NAMES)
def test_a_table_of_one_runs_hidden_inputs_scores_nothing_in_the_next(name):
    """The answers' outputs for one grading run's hidden inputs, replayed in another run (answer functions; the
    modules' inputs are drawn the same way)."""
    suite = load_suite(ROOT / "exercises", name)
    solved = _source_namespace(name)
    hidden = [t for t in suite.tests if t.hidden]
    assert all(t.seeded for t in hidden), f"{name}: every hidden test draws its inputs from the run's seed"
    functions = [t for t in hidden if not any(isinstance(solved[a], type) for a in t.answers)]
    replayable = 0
    for spec in functions:
        tables = {a: {} for a in spec.answers}
        recorders = {a: _recorded(solved[a], tables[a]) for a in spec.answers}
        first = probe.gather(spec, {**solved, **{a: r[0] for a, r in recorders.items()}}, SEED)
        assert probe.check(spec, first, SEED) == (True, ""), spec.name
        replayed = {**solved, **{a: r[1] for a, r in recorders.items()}}
        replayable += probe.check(spec, probe.gather(spec, replayed, SEED), SEED)[0]  # in the same run it works
        assert not probe.check(spec, probe.gather(spec, replayed, SEED + 1), SEED + 1)[0], (
            f"{name}: {spec.name} passes with a table of another run's inputs"
        )
    assert replayable, f"{name}: no hidden test of an answer function replays (the tables recorded nothing?)"


#: What a public check's code may call after its yield: comparisons with stored values, nothing that computes one.
_COMPUTES = {
    "sin",
    "cos",
    "exp",
    "log",
    "pow",
    "polar",
    "arange",
    "linspace",
    "randn",
    "rand",
    "randint",
    "normal_",
    "manual_seed",
    "Embedding",
    "embedding",
    "softmax",
    "cosine_similarity",
    "sinusoidal_table",
    "cumsum",
}


@pytest.mark.parametrize("name", NAMES)
def test_public_checks_hold_no_reference_implementation(name):
    """Learners get ``checks/*.py`` and the sandbox mounts it: it imports only torch, math and the test runtime, a
    helper that computes values only runs the learner's answer (passed to ``run``), and the checking halves compute
    no expected value."""
    import ast

    path = ROOT / "exercises" / "checks" / f"{name}.py"
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            assert module in ("math", "course_embed.tools.grading.probe") or module.split(".")[0] == "torch", (
                f"{path.name} imports {module}"
            )
    tests = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.decorator_list]
    helpers = {f.name for f in tree.body if isinstance(f, ast.FunctionDef) and not f.decorator_list}
    passed_to_run = {
        c.args[0].id
        for c in ast.walk(tree)
        if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "run" and c.args and isinstance(c.args[0], ast.Name)
    }
    for helper in [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name in helpers - passed_to_run]:
        called = {
            getattr(c.func, "attr", getattr(c.func, "id", "")) for c in ast.walk(helper) if isinstance(c, ast.Call)
        }
        assert not called & _COMPUTES, f"{path.name}: {helper.name} computes values but runs no answer"
    for func in tests:
        after = False
        for stmt in func.body:
            after = after or any(isinstance(n, ast.Yield) for n in ast.walk(stmt))
            if not after:
                continue
            called = {
                getattr(c.func, "attr", getattr(c.func, "id", "")) for c in ast.walk(stmt) if isinstance(c, ast.Call)
            }
            assert not called & _COMPUTES, f"{path.name}: {func.name} computes an expected value: {called & _COMPUTES}"


#: A cell a student could add to a notebook whose answers are all left ``...``: it replaces the runner's gathering
#: with one that runs every test against answers that echo their inputs (a module: the rows of its zero table) and
#: reports every flag True and every tensor zero (on the checks before they owned their inputs, it scored exercise
#: 01's q2 lookup test).
FORGER = """
from course_embed.tools.grading import probe as _probe

_real_gather = _probe.gather


class _Echo(torch.nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        sizes = [a for a in args if isinstance(a, int)][:2]
        self.weight = torch.nn.Parameter(torch.zeros(*sizes) if len(sizes) == 2 else torch.zeros(1, 1))
        self.token = self

    def forward(self, x, *args, **kwargs):
        return self.weight[x] if isinstance(x, torch.Tensor) and not x.is_floating_point() else x


def _echo(*args, **kwargs):
    return next((a for a in args if isinstance(a, torch.Tensor)), args[0] if args else None)


def _true(data):
    if isinstance(data, bool):
        return True
    if isinstance(data, list):
        return [_true(v) for v in data]
    if isinstance(data, dict) and data.get("__tensor__") and "data" in data:
        return {**data, "data": torch.zeros_like(data["data"])}
    if isinstance(data, dict):
        return {k: _true(v) for k, v in data.items()}
    return data


def _forged(spec, namespace, seed=None):
    fake = {a: _Echo if a[0].isupper() else _echo for a in spec.answers}
    return _true(_real_gather(spec, fake, seed))


_probe.gather = _forged
"""


def test_a_forged_submission_without_answers_scores_zero_when_graded(built_exercises):
    """Through the sandbox: each exercise's untouched notebook, plus a cell that replaces the gathering function."""
    from concurrent.futures import ThreadPoolExecutor

    from course_embed.tools.grading.submission import grade_notebook

    def grade(name):
        nb = nbformat.read(built_exercises[name].student, as_version=4)
        first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "import torch" in c.source)
        nb.cells.insert(first + 1, nbformat.v4.new_code_cell(FORGER))
        graded = grade_notebook(nbformat.from_dict(nb), load_suite(ROOT / "exercises", name), timeout=240)
        return {r.name: r.score for r in graded.results}, graded.error

    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(NAMES, pool.map(grade, NAMES), strict=True))
    for name, (scores, error) in results.items():
        assert scores and not any(scores.values()), f"{name}: a forged submission scores {scores} ({error})"
