"""Every command the book gives a learner works after the README's install, as written: the introduction's
"Running the chapters yourself" and the exercises page's "Open one". ``python3`` in a command is the running
interpreter (the environment the README's install filled); a ``jupyter lab`` command is started as written, on
127.0.0.1 without a browser, and must serve what it was asked to open. Then the workflow itself, in Chromium
(Playwright on the system's browser, as the site's tests): an exercise run with its checks' feedback, and chapter 3's
explorer redrawn when a slider moves."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest

from .test_notebooks import ROOT

#: Where the book gives a learner commands: (page, the section's heading).
SECTIONS = [("book/intro.ipynb", "Running the chapters yourself"), ("book/exercises.md", "Open one")]


def _page_text(page: str) -> str:
    path = ROOT / page
    if path.suffix == ".ipynb":
        nb = nbformat.read(path, as_version=4)
        return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    return path.read_text()


def learner_commands(page: str, heading: str) -> list[str]:
    """The lines of the ```bash blocks in the section ``heading`` of ``page``, comments dropped."""
    text = _page_text(page)
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end > 0 else None]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert blocks, f"{page}: no bash block under '## {heading}'"
    return [line.split("#")[0].strip() for block in blocks for line in block.splitlines() if line.split("#")[0].strip()]


COMMANDS = [(page, command) for page, heading in SECTIONS for command in learner_commands(page, heading)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def jupyter_lab(argv: list[str], tmp_path: Path, timeout: float = 300, cwd: Path = ROOT):
    """Start ``argv`` (a ``jupyter lab`` command with the running interpreter) in ``cwd`` on 127.0.0.1 without a
    browser or a token; yield its base URL once it answers. The server is stopped whatever happens."""
    port = _free_port()
    flags = [f"--port={port}", "--ip=127.0.0.1", "--no-browser", "--IdentityProvider.token=", "--ServerApp.password="]
    if os.geteuid() == 0:  # CI runs as root, which JupyterLab refuses without this; a learner is no root
        flags.append("--allow-root")
    # its own runtime and workspace folders: a workspace that an earlier JupyterLab saved in the user's home would
    # reopen that session's notebooks beside the one asked for
    env = {
        **os.environ,
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
    }
    log = (tmp_path / "jupyter_lab.log").open("w")
    server = subprocess.Popen(argv + flags, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            assert server.poll() is None, f"{shlex.join(argv)} exited: {(tmp_path / 'jupyter_lab.log').read_text()}"
            try:
                with urllib.request.urlopen(f"{base}/api/status", timeout=10) as reply:
                    json.load(reply)
                break
            except OSError:
                assert time.monotonic() < deadline, f"{shlex.join(argv)} did not answer on {base}"
                time.sleep(0.5)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def test_the_book_gives_the_learner_commands_to_install_and_open():
    commands = [command for _, command in COMMANDS]
    assert "python3 -m pip install -r requirements.txt" in commands
    assert any(command.startswith("python3 -m jupyter lab ") for command in commands)
    pins = (ROOT / "requirements.txt").read_text()
    assert re.search(r"^jupyterlab==\S+", pins, flags=re.M), "requirements.txt must pin JupyterLab"


@pytest.mark.parametrize("page, command", COMMANDS, ids=[f"{p}: {c}" for p, c in COMMANDS])
def test_each_learner_command_works_as_written(page, command, tmp_path):
    argv = shlex.split(command)
    assert argv[0] == "python3", f"{page}: {command!r} must run with the environment's python3"
    argv[0] = sys.executable
    if argv[1:3] == ["-m", "pip"]:  # the README's install runs it (scripts/install.sh): check it, not repeat it
        assert argv[3:] == ["install", "-r", "requirements.txt"], f"{page}: {command!r} is not the README's install"
        assert "-m pip install --quiet -r requirements.txt" in (ROOT / "scripts" / "install.sh").read_text()
        return
    assert argv[1:4] == ["-m", "jupyter", "lab"], f"{page}: {command!r} is neither the install nor JupyterLab"
    (target,) = argv[4:]
    assert (ROOT / target).exists(), f"{page}: {command!r} opens {target}, which does not exist"
    # `jupyter lab` serves the folder it is given, or the folder of the notebook it is given, and opens the notebook.
    path = "" if (ROOT / target).is_dir() else Path(target).name
    with jupyter_lab(argv, tmp_path) as base:
        with urllib.request.urlopen(f"{base}/api/contents/{path}", timeout=60) as reply:
            served = json.load(reply)
        if path:
            assert served["type"] == "notebook" and served["content"]["cells"], served["type"]
        else:
            names = {item["name"] for item in served["content"]}
            assert {p.name for p in (ROOT / target).glob("*.ipynb")} <= names, names
        with urllib.request.urlopen(f"{base}/lab", timeout=60) as reply:
            assert "JupyterLab" in reply.read().decode()


def test_a_learner_runs_an_exercise_in_jupyterlab_and_sees_the_checks_feedback(tmp_path):
    """The exercises page's workflow in a real browser: JupyterLab (from the running interpreter) opens a student
    notebook, Run > Run All Cells runs it, and under each check cell the grader's feedback is rendered (the answers
    are still ``...``, so each check says it failed and why)."""
    from playwright.sync_api import sync_playwright

    from course_embed.tools import browser
    from course_embed.tools.grading import load_suite

    work = tmp_path / "exercises"  # a copy: running all cells writes the export zip next to the notebook
    shutil.copytree(ROOT / "exercises", work, ignore=shutil.ignore_patterns("source", "*.zip", ".ipynb_checkpoints"))
    name = "01_token_embedding.ipynb"
    argv = [sys.executable, "-m", "jupyter", "lab", name]
    with jupyter_lab(argv, tmp_path, cwd=work) as base, sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(browser.find_browser()), args=browser.ARGS)
        try:
            page = chromium.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{base}/lab/tree/{name}", timeout=180_000)
            cells = "document.querySelectorAll('.jp-Notebook .jp-CodeCell').length"
            page.wait_for_function(f"{cells} > 5", timeout=180_000)  # the notebook, not its placeholder
            page.get_by_text("| Idle").first.wait_for(timeout=180_000)  # the kernel started (status bar)
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            for question in ("q1", "q2", "q3"):
                check = page.locator(".jp-InputArea", has_text=f'grader.check("{question}")')
                cell = page.locator(".jp-CodeCell", has=check)
                assert cell.count() == 1, f"{name}: {cell.count()} cells run grader.check({question!r})"
                feedback = cell.locator(".jp-OutputArea-output", has_text=f"{question} results")
                feedback.wait_for(timeout=300_000)
                text = feedback.text_content()  # the text even of a cell scrolled out of view
                # under the check cell: the failure, and a sentence naming the question's answer and why
                tests = load_suite(ROOT / "exercises", Path(name).stem).tests
                answers = {a for t in tests if t.question == question for a in t.answers}
                assert "Test case failed" in text and any(a in text for a in answers), (answers, text)
        finally:
            chromium.close()


def test_chapter_3s_explorer_renders_in_jupyterlab_and_redraws_when_a_slider_moves(tmp_path):
    """The introduction's workflow on the chapter with a widget: Run All Cells in JupyterLab renders the explorer's
    sliders and figure, and moving a slider (its handle, by keyboard) draws a new figure."""
    from playwright.sync_api import expect, sync_playwright

    from course_embed.tools import browser

    work = tmp_path / "book"  # a copy: a learner's run may write next to the chapter
    shutil.copytree(ROOT / "book", work, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    name = "03_sinusoidal.ipynb"
    argv = [sys.executable, "-m", "jupyter", "lab", name]
    with jupyter_lab(argv, tmp_path, cwd=work) as base, sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(browser.find_browser()), args=browser.ARGS)
        try:
            page = chromium.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{base}/lab/tree/{name}", timeout=180_000)
            cells = "document.querySelectorAll('.jp-Notebook .jp-CodeCell').length"
            page.wait_for_function(f"{cells} > 5", timeout=180_000)
            page.get_by_text("| Idle").first.wait_for(timeout=180_000)
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            handle = page.locator(".widget-slider .noUi-handle").first
            handle.wait_for(state="attached", timeout=300_000)
            output = page.locator(".jp-OutputArea-output", has=page.locator(".widget-slider")).first
            figure = output.locator("img").first
            figure.wait_for(timeout=180_000)
            drawn, readout = figure.get_attribute("src"), output.locator(".widget-readout").first.inner_text()
            handle.scroll_into_view_if_needed()
            handle.focus()
            for _ in range(3):
                page.keyboard.press("ArrowRight")
            expect(output.locator(".widget-readout").first).not_to_have_text(readout, timeout=60_000)
            expect(output.locator("img").first).not_to_have_attribute("src", drawn, timeout=180_000)
        finally:
            chromium.close()
