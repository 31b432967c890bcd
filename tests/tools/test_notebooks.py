"""The notebook pipeline: re-execution is byte-stable, and every chapter is stored executed and clean."""

import json
import re
from pathlib import Path

import nbformat
import pytest
import yaml
from nbformat.v4 import new_code_cell, new_notebook

from course_embed.tools.notebooks import (
    coalesce_streams,
    execute_notebook,
    stable_widget_ids,
)

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "book").glob("*.ipynb"))


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part["chapters"]]
    return files


def test_reexecution_leaves_the_file_unchanged(tmp_path):
    nb = new_notebook(
        cells=[
            new_code_cell("import sys, time\nfor i in range(5):\n    print(i, flush=True)\n    time.sleep(0.05)"),
            new_code_cell("import ipywidgets as w\nw.IntSlider(value=3)"),
            new_code_cell("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"),
        ]
    )
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "demo.ipynb"
    nbformat.write(nb, path)
    execute_notebook(path)
    first = path.read_bytes()
    execute_notebook(path)
    assert path.read_bytes() == first

    stored = nbformat.reads(first.decode(), as_version=4)
    streams = [o for o in stored.cells[0].outputs if o.output_type == "stream"]
    assert len(streams) == 1 and streams[0].text == "0\n1\n2\n3\n4\n"
    assert all("execution" not in c.metadata for c in stored.cells)  # record_timing=False
    assert stored.metadata.widgets  # store_widget_state=True
    assert "image/png" in stored.cells[2].outputs[0].data


def test_stable_widget_ids_renames_every_occurrence():
    old = "a" * 32
    nb = nbformat.from_dict(
        {
            "metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {"state": {old: {"state": {}}}}}},
            "cells": [
                {
                    "cell_type": "code",
                    "source": "",
                    "metadata": {},
                    "outputs": [
                        {
                            "output_type": "display_data",
                            "metadata": {},
                            "data": {"application/vnd.jupyter.widget-view+json": {"model_id": old}},
                        }
                    ],
                }
            ],
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )
    renamed = json.dumps(stable_widget_ids(nb, "demo"))
    assert old not in renamed
    assert (
        renamed.count(
            json.loads(renamed)["cells"][0]["outputs"][0]["data"]["application/vnd.jupyter.widget-view+json"][
                "model_id"
            ]
        )
        == 2
    )


def test_coalesce_keeps_stdout_and_stderr_apart():
    nb = nbformat.from_dict(
        {
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
            "cells": [
                {
                    "cell_type": "code",
                    "source": "",
                    "metadata": {},
                    "outputs": [
                        {"output_type": "stream", "name": "stdout", "text": "a"},
                        {"output_type": "stream", "name": "stdout", "text": "b"},
                        {"output_type": "stream", "name": "stderr", "text": "c"},
                        {"output_type": "stream", "name": "stdout", "text": "d"},
                    ],
                }
            ],
        }
    )
    outs = coalesce_streams(nb).cells[0].outputs
    assert [(o.name, o.text) for o in outs] == [("stdout", "ab"), ("stderr", "c"), ("stdout", "d")]


def test_toc_lists_only_existing_files_and_every_chapter():
    listed = toc_files()
    for entry in listed:
        assert list(ROOT.glob(entry + ".*")), f"_toc.yml lists {entry}, which does not exist"
    for chapter in CHAPTERS:
        assert str(chapter.relative_to(ROOT).with_suffix("")) in listed, f"{chapter.name} is not in _toc.yml"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_is_stored_executed_and_clean(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), "execute it with course-embed execute"
    assert "import course_embed" in "".join(c.source for c in code)
    assert nb.cells[0].cell_type == "markdown" and "learning goals" in nb.cells[0].source.lower()
    assert "check yourself" in "".join(c.source for c in nb.cells if c.cell_type == "markdown").lower()
    for i, cell in enumerate(code):
        assert not cell.source.rstrip().endswith(";"), f"cell {i} ends with ';', which nbval ignores"
        for out in cell.outputs:
            assert out.output_type != "error", f"cell {i} stored an error"
            assert "image/svg+xml" not in out.get("data", {}), f"cell {i} stores an SVG (it embeds a date)"
            text = out.get("text", "") + out.get("data", {}).get("text/plain", "")
            assert not re.search(r"0x[0-9a-f]{8,}", text), f"cell {i} prints a memory address"
            assert "execution" not in cell.metadata
