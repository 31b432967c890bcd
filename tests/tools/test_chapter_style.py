"""Chapters fit the page and the sitting: no code line longer than 88 characters (the site cuts longer lines off),
and at most 4,000 words of prose a page (every markdown cell, answers in dropdowns included)."""

from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "book").glob("*.ipynb"))
LIMIT = 88
WORDS = 4000


def long_lines(path: Path) -> list[str]:
    """``"cell N, line M: K chars"`` for every code line of the notebook longer than :data:`LIMIT`."""
    found = []
    cells = nbformat.read(path, as_version=4).cells
    for i, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        for j, line in enumerate(cell.source.splitlines(), start=1):
            if len(line) > LIMIT:
                found.append(f"cell {i}, line {j}: {len(line)} chars")
    return found


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_code_lines_fit_the_page(path):
    assert not long_lines(path), f"{path.name}: code lines over {LIMIT} characters: {long_lines(path)}"


def test_the_check_can_fail(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1\n" + "y = " + "1 + " * 30 + "1")]
    path = tmp_path / "wide.ipynb"
    nbformat.write(nb, path)
    assert long_lines(path) == [f"cell 0, line 2: {4 + 4 * 30 + 1} chars"]


def prose_words(path: Path) -> int:
    """The words of every markdown cell (split at white space, mathematics and markup included)."""
    cells = nbformat.read(path, as_version=4).cells
    return sum(len(cell.source.split()) for cell in cells if cell.cell_type == "markdown")


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_a_page_is_read_in_one_sitting(path):
    assert prose_words(path) <= WORDS, f"{path.name}: {prose_words(path)} words of prose, more than {WORDS}"


def test_the_word_count_counts_markdown_only(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A title\n\nTwo $x + y$ words."), nbformat.v4.new_code_cell("a = 1")]
    path = tmp_path / "short.ipynb"
    nbformat.write(nb, path)
    assert prose_words(path) == 8
