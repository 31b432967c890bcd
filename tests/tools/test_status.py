"""The execution status page: measured by strict nbval, rendered from its JSON, and never older than the chapters."""

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from course_embed.tools.status import (
    STATUS_JSON,
    STATUS_PAGE,
    measure,
    render_page,
    stale_chapters,
    summarise_junit,
    toc_chapters,
    update,
)

from .test_notebooks import ROOT, toc_files

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="4">
<testcase classname="book.demo.ipynb" name="Cell 0" time="2.250" />
<testcase classname="book.demo.ipynb" name="Cell 1" time="0.500"><failure message="outputs differ">...</failure>
</testcase>
<testcase classname="book.demo.ipynb" name="Cell 2" time="0.125"><skipped message="nbval-skip" /></testcase>
<testcase classname="book.demo.ipynb" name="Cell 3" time="0.075"><error message="timeout">...</error></testcase>
</testsuite></testsuites>"""


def test_summarise_junit_adds_times_and_names_failed_cells():
    assert summarise_junit(JUNIT) == {
        "seconds": 3.0,
        "cells": 4,
        "failed_cells": ["Cell 1", "Cell 3"],
        "skipped_cells": 1,
    }
    with pytest.raises(ValueError, match="no test cases"):
        summarise_junit("<testsuites><testsuite name='pytest' tests='0'/></testsuites>")


def test_measure_runs_strict_nbval_and_finds_the_cell_that_no_longer_reproduces(tmp_path):
    def cell(source, text, tags=()):
        code = new_code_cell(source, execution_count=1, outputs=[new_output("stream", name="stdout", text=text)])
        code.metadata["tags"] = list(tags)
        return code

    nb = new_notebook(
        cells=[
            new_markdown_cell("# 9. A demo chapter\n\nText."),
            cell("print(1 + 1)", "2\n"),  # reproduces
            cell("print(2 + 2)", "5\n"),  # stored output is wrong
            cell("print('varies')", "anything\n", ["nbval-ignore-output"]),
        ]
    )  # run, not compared
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "09_demo.ipynb"
    nbformat.write(nb, path)
    record = measure(path, ROOT, timeout=120)
    assert record["title"] == "9. A demo chapter"
    assert (record["cells"], record["failed_cells"], record["reproduces"]) == (3, ["Cell 1"], False)
    assert record["seconds"] > 0 and record["environment"]["cpus"] >= 1 and record["environment"]["load"] >= 0
    assert len(record["sha256"]) == 64


def test_render_page_shows_every_record_and_the_verdict():
    env = {"python": "3.11.7", "torch": "2.13.0", "cpus": 2, "platform": "Linux x86_64"}
    records = {
        "book/01_a.ipynb": {
            "title": "1. A",
            "sha256": "a" * 64,
            "seconds": 8.14,
            "cells": 15,
            "failed_cells": [],
            "skipped_cells": 0,
            "reproduces": True,
            "measured": "2026-01-02",
            "environment": env,
        },
        "book/02_b.ipynb": {
            "title": "2. B",
            "sha256": "b" * 64,
            "seconds": 20.0,
            "cells": 9,
            "failed_cells": ["Cell 3", "Cell 7"],
            "skipped_cells": 0,
            "reproduces": False,
            "measured": "2026-01-03",
            "environment": {**env, "load": 9.84},
        },
    }
    page = render_page(records)
    assert page.startswith("# Execution status\n")
    assert (
        "| [1. A](01_a.ipynb) | 8.1 s | 15 | yes | 2026-01-02, Python 3.11.7, torch 2.13.0, 2 CPUs | `aaaaaaaaaaaa` |"
        in page
    )
    assert (
        "| [2. B](02_b.ipynb) | 20.0 s | 9 | **no**: Cell 3, Cell 7 differ | "
        "2026-01-03, Python 3.11.7, torch 2.13.0, 2 CPUs, load 9.8 |"
    ) in page
    assert "| **Total** | 28.1 s | 24 | | | |" in page
    assert "`ATEN_CPU_CAPABILITY=avx2`" in page  # the second kernel selection CI checks


def test_update_refuses_a_notebook_that_is_not_a_published_chapter(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nparts:\n  - caption: C\n    chapters:\n      - file: book/01_a\n"
    )
    nbformat.write(new_notebook(), tmp_path / "book" / "01_a.ipynb")
    nbformat.write(new_notebook(), tmp_path / "book" / "99_draft.ipynb")
    assert toc_chapters(tmp_path) == [STATUS_JSON.parent / "01_a.ipynb"]
    with pytest.raises(ValueError, match=r"notebooks: book/99_draft.ipynb is not a chapter listed in _toc.yml"):
        update(tmp_path, [tmp_path / "book" / "99_draft.ipynb"])
    assert stale_chapters(tmp_path, {}) == ["book/01_a.ipynb"]


def test_status_page_lists_every_chapter_and_is_current():
    records = json.loads((ROOT / STATUS_JSON).read_text())
    chapters = [f"{entry}.ipynb" for entry in toc_files() if (ROOT / f"{entry}.ipynb").exists()]
    assert list(records) == chapters, "run `course-embed status` to list exactly the chapters in _toc.yml"
    stale = stale_chapters(ROOT, records)
    assert not stale, (
        f"these chapters changed since their status was measured; run `course-embed status {' '.join(stale)}`"
    )
    assert (ROOT / STATUS_PAGE).read_text() == render_page(records), (
        "book/status.md is generated: run `course-embed status` instead of editing it"
    )
    assert "book/status" in toc_files()


def test_status_command_rejects_a_draft(monkeypatch, capsys):
    from course_embed.tools.cli import main

    monkeypatch.chdir(ROOT)
    assert main(["status", "book/99_not_a_chapter.ipynb"]) == 2
    assert "is not a chapter listed in _toc.yml" in capsys.readouterr().err
