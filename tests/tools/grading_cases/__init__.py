"""Shared by test_exercises.py and test_grading.py: the exercises built once per run, and submissions made from them.

The student notebooks are built into one folder per test run and shared by xdist workers through a file lock, like
the book build in conftest.py. :mod:`.cheats` holds the cheating and broken submissions of the grading batch.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import nbformat
import pytest
from filelock import FileLock

from course_embed.tools.grading import ANSWER_TAG, Assigned, assign, find_exercises

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = find_exercises(ROOT / "exercises")
NAMES = [e.name for e in EXERCISES]

#: For each exercise, answers that only reuse course_embed's implementation, by answer cell (0 = the first):
#: an import under the question's name, a subclass, a hand-written wrapper (the questions chosen so that no other
#: answer of the notebook depends on them; more shortcuts are in :mod:`.cheats`). None of them
#: may earn the points of its question: the sandbox's course_embed holds only ``setup``.
ALIASES = {
    "01_token_embedding": {
        1: "from course_embed import TokenEmbedding",
    },
    "02_scaling": {
        0: "from course_embed.lab.token_embedding import init_std\n"
        "\n"
        "def expected_norm_ratio(init, vocab_size, d_model, scale=True):\n"
        "    pe = ce.sinusoidal_table(1, d_model).norm().item()\n"
        "    return init_std(init, vocab_size, d_model) * d_model ** 0.5 * (d_model ** 0.5 if scale else 1) / pe",
        1: "tie = ce.tie_weights",
    },
    "03_sinusoidal": {
        1: "def rotation(k, d_model, base=10000.0):\n    return ce.offset_rotation(k, d_model, base)",
    },
    "04_fusion": {
        1: "class ConcatFusion(nn.Module):\n"
        "    def __init__(self, vocab_size, d_model, d_position=None, padding_idx=None):\n"
        "        super().__init__()\n"
        "        self.inner = ce.TransformerEmbedding(vocab_size, d_model, fusion='concat', dropout=0.0,\n"
        "                                             d_position=d_position, padding_idx=padding_idx)\n"
        "        self.token = self.inner.token\n"
        "\n"
        "    def forward(self, ids, offset=0):\n"
        "        return self.inner(ids, offset)",
    },
    "05_rope_alibi": {
        0: "def rope(x, offset=0, base=10000.0):\n    return ce.RotaryEmbedding(x.shape[-1], base).rotate(x, offset)",
    },
    "06_optimization": {
        0: "from course_embed.fusion import lookup_add_reference as lookup_add",
    },
}


def answer_cells(nb) -> list[int]:
    """Indices of the cells where the learner writes answers, in order."""
    return [i for i, c in enumerate(nb.cells) if ANSWER_TAG in c.metadata.get("tags", [])]


def with_answers(nb, answers: dict[int, str]):
    """A copy of ``nb`` whose answer cells number ``k`` (0 = first) hold ``answers[k]``."""
    nb = copy.deepcopy(nb)
    cells = answer_cells(nb)
    for k, source in answers.items():
        nb.cells[cells[k]].source = source
    return nb


def solution_answers(built: Assigned) -> list[str]:
    """The solution's source of every answer cell (the solution notebook has the same cells, in the same order)."""
    student = nbformat.read(built.student, as_version=4)
    solution = nbformat.read(built.solution, as_version=4)
    return [solution.cells[i].source for i in answer_cells(student)]


@pytest.fixture(scope="session")
def built_exercises(tmp_path_factory) -> dict[str, Assigned]:
    """Every exercise run through ``otter assign`` once per test run: student notebook and solution."""
    base = tmp_path_factory.getbasetemp()
    # xdist workers share the run's folder (the parent of theirs); without xdist that parent outlives the run
    out = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "exercises-build"
    built = {}
    with FileLock(str(out) + ".lock"):
        for exercise in EXERCISES:
            folder = out / exercise.name
            done = folder / "done"
            if not done.exists():
                assign(exercise.source, folder)
                done.touch()
            built[exercise.name] = Assigned(
                folder / f"{exercise.name}.ipynb", folder / f"{exercise.name}-solution.ipynb"
            )
    return built
