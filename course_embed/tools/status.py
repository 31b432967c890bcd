"""The execution status page: each chapter's time on the CPU and whether its stored outputs reproduce.

``course-embed status`` runs each chapter listed in ``_toc.yml`` through the same check as CI, strict nbval
(``pytest --nbval`` with the project's ``pyproject.toml`` options and ``nbval_sanitize.cfg``), on the CPU
(``COURSE_EMBED_DEVICE=cpu``), reads the per-cell results from nbval's JUnit report, and writes two files:

    book/status.json   one record per chapter (sha256 of the notebook, seconds, cells, failed cells, when, where)
    book/status.md     the page, rendered from the JSON by ``render_page`` (never edited by hand)

The notebook's sha256 ties each record to the exact file measured: ``stale_chapters`` names the chapters that changed
(or were added to the table of contents) since, and a test fails until they are measured again.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import yaml

from .progress import Steps

STATUS_JSON = Path("book") / "status.json"
STATUS_PAGE = Path("book") / "status.md"


def toc_chapters(root: str | Path) -> list[Path]:
    """The notebooks listed in ``root/_toc.yml``, in book order, as paths relative to ``root``."""
    root = Path(root)
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    entries = [toc["root"]] + [c["file"] for part in toc.get("parts", []) for c in part.get("chapters", [])]
    return [Path(f"{entry}.ipynb") for entry in entries if (root / f"{entry}.ipynb").is_file()]


def notebook_sha256(path: str | Path) -> str:
    """Hex sha256 of the notebook file as stored (outputs included)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def notebook_title(path: str | Path) -> str:
    """The chapter's title: the first ``# `` heading of its first markdown cell (the file name if there is none)."""
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return Path(path).stem


def summarise_junit(xml_text: str) -> dict:
    """Per-notebook totals from a pytest JUnit report of an nbval run (one ``testcase`` per code cell).

    Returns ``{"seconds": float, "cells": int, "failed_cells": [names], "skipped_cells": int}``; a cell counts as
    failed when its testcase holds a ``failure`` or an ``error``. Raises ``ValueError`` if the report has no cells.
    """
    cases = ET.fromstring(xml_text).iter("testcase")
    seconds, cells, failed, skipped = 0.0, 0, [], 0
    for case in cases:
        cells += 1
        seconds += float(case.get("time", 0))
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(case.get("name", "?"))
        elif case.find("skipped") is not None:
            skipped += 1
    if cells == 0:
        raise ValueError("xml_text: the JUnit report holds no test cases; did nbval collect the notebook?")
    return {"seconds": round(seconds, 1), "cells": cells, "failed_cells": failed, "skipped_cells": skipped}


def measure(notebook: str | Path, root: str | Path, timeout: int = 600) -> dict:
    """Run strict nbval on ``notebook`` on the CPU with ``root``'s pytest options; return its status record.

    The record: title, sha256, seconds (all cells, kernel start-up included), cells, failed_cells, skipped_cells,
    reproduces (no failed cell), measured (UTC date) and the environment (Python, torch, CPU count, platform, and the
    load average when the chapter started).
    Raises ``RuntimeError`` with pytest's output if nbval produced no report.
    """
    load = os.getloadavg()[0]  # runnable processes over the last minute, before the chapter adds its own
    import torch

    notebook, root = Path(notebook), Path(root)
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "nbval.xml"
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(root / "pyproject.toml"),
            "--rootdir",
            str(root),
            "-n0",
            "-q",
            f"--junitxml={report}",
            f"--nbval-cell-timeout={timeout}",
            str(notebook.resolve()),
        ]
        proc = subprocess.run(
            command, cwd=root, env={**os.environ, "COURSE_EMBED_DEVICE": "cpu"}, capture_output=True, text=True
        )
        if not report.is_file():
            raise RuntimeError(f"nbval produced no report for {notebook}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
        summary = summarise_junit(report.read_text())
    return {
        "title": notebook_title(notebook),
        "sha256": notebook_sha256(notebook),
        **summary,
        "reproduces": not summary["failed_cells"],
        "measured": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "environment": {
            "python": platform.python_version(),
            "torch": torch.__version__.split("+")[0],
            "cpus": os.cpu_count(),
            "platform": f"{platform.system()} {platform.machine()}",
            "load": round(load, 1),
        },
    }


def stale_chapters(root: str | Path, records: dict) -> list[str]:
    """Chapters in the table of contents whose record is missing or was measured on a different file."""
    root = Path(root)
    return [
        path.as_posix()
        for path in toc_chapters(root)
        if records.get(path.as_posix(), {}).get("sha256") != notebook_sha256(root / path)
    ]


def render_page(records: dict) -> str:
    """The status page (MyST markdown) for ``records``: chapter path -> record, in book order."""
    lines = [
        "# Execution status",
        "",
        "<!-- Generated by `course-embed status` from book/status.json. Do not edit: run the command again. -->",
        "",
        "Every chapter is a notebook stored with its outputs; the site shows those outputs. This table says, for each",
        "chapter, how long it took to run on the CPU and whether its stored outputs reproduce. It is written by",
        "`course-embed status`, which runs each chapter through the same check as continuous integration: strict",
        "[nbval](https://github.com/computationalmodelling/nbval) re-executes every cell and compares each stored",
        "output with the new one (after the few rules in `nbval_sanitize.cfg`; cells tagged `nbval-ignore-output`,",
        "such as widgets and animations, are run but not compared). Each row records the exact notebook it measured",
        "(its sha256): a test fails when a chapter changes after its row was written, so the table is never older",
        "than the chapters.",
        "",
        "Continuous integration runs this check on x86-64 Linux twice: with the kernels PyTorch picks on its machine,",
        "and again with AVX2 kernels (`ATEN_CPU_CAPABILITY=avx2`). Different kernels round differently, so a chapter",
        'prints a round-off as a bound ("< 1e-6"), a trained result at the precision its kernel-to-kernel spread',
        "allows, or a result read from a recorded results file that a test re-runs within a stated tolerance. Not",
        "checked: x86-64 CPUs without AVX2 (which run PyTorch's plain kernels), macOS and arm64; there the code runs,",
        "but round-off and training cells may print other trailing digits. Figures are not compared (a figure's bytes",
        "depend on the plotting library's build); the functions that draw them are tested instead.",
        "",
        "| Chapter | Time on CPU | Code cells | Stored outputs reproduce | Measured | Notebook sha256 |",
        "|:--|--:|--:|:--|:--|:--|",
    ]
    total, cells = 0.0, 0
    for path, record in records.items():
        link = f"[{record['title']}]({Path(path).name})"
        verdict = "yes" if record["reproduces"] else "**no**: " + ", ".join(record["failed_cells"]) + " differ"
        env = record["environment"]
        where = f"{record['measured']}, Python {env['python']}, torch {env['torch']}, {env['cpus']} CPUs"
        if "load" in env:
            where += f", load {env['load']:.1f}"
        lines.append(
            f"| {link} | {record['seconds']:.1f} s | {record['cells']} | {verdict} | {where} | "
            f"`{record['sha256'][:12]}` |"
        )
        total += record["seconds"]
        cells += record["cells"]
    # The numbers stay in table cells of their own: the Chinese edition's catalogue keeps a cell without words as it
    # is (course_embed.tools.translations), so re-measuring changes no sentence that needs translating again.
    lines += [
        f"| **Total** | {total:.1f} s | {cells} | | | |",
        "",
        "Times are wall-clock seconds for all of a chapter's cells, the kernel's start-up and the first `import torch`",
        "included, on the machine named in the row, with the load average it had when the chapter started (on 2 CPUs",
        "a load above 2 means the chapter shared them, and its time grows with the load); they vary from run to run",
        "and are not checked by any test.",
        "",
        "To measure again (after changing a chapter, or to refresh the times):",
        "",
        "```bash",
        "# every chapter listed in _toc.yml",
        "course-embed status",
        "# one chapter (the other rows are kept)",
        "course-embed status book/03_sinusoidal.ipynb",
        "```",
        "",
    ]
    return "\n".join(lines)


def update(root: str | Path, notebooks: list[str | Path] | None = None, timeout: int = 600, progress=None) -> dict:
    """Measure ``notebooks`` (default: every chapter in the table of contents), merge them into
    ``root/book/status.json`` (dropping chapters no longer in the table of contents) and rewrite the page.

    Each chapter says on stderr when its measurement starts and how long it took; ``progress``, if given, is called
    with (path, record) after each chapter. Returns the records written.
    Raises ``ValueError`` for a notebook that is not a chapter in ``_toc.yml``.
    """
    root = Path(root)
    chapters = [p.as_posix() for p in toc_chapters(root)]
    wanted = (
        chapters
        if not notebooks
        else [Path(os.path.relpath(Path(n).resolve(), root.resolve())).as_posix() for n in notebooks]
    )
    for path in wanted:
        if path not in chapters:
            raise ValueError(
                f"notebooks: {path} is not a chapter listed in _toc.yml ({', '.join(chapters)}); "
                "only published chapters get a status row"
            )
    json_path = root / STATUS_JSON
    old = json.loads(json_path.read_text()) if json_path.is_file() else {}
    measured, steps = {}, Steps(len(wanted))
    for path in wanted:
        with steps.step(path, "running it under strict nbval on CPU"):
            measured[path] = measure(root / path, root, timeout=timeout)
        if progress:
            progress(path, measured[path])
    records = {path: measured.get(path, old.get(path)) for path in chapters if path in measured or path in old}
    json_path.write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n")
    (root / STATUS_PAGE).write_text(render_page(records))
    return records
