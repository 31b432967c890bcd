"""Long work shows what it is doing and how far it is: a line on stderr when each step starts and one when it ends
(its number of the total and its elapsed time), for the site's build, the PDF, `course-embed execute` and
`course-embed status`. The times are checked for their form, never their value."""

import io
import re
import subprocess
import sys
import time

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from course_embed.tools import build
from course_embed.tools.cli import main
from course_embed.tools.progress import Steps

DONE = r"\[(\d+)/(\d+)\] (.+): done in \d+ s \(\d+ s in all\)"


def test_each_step_says_when_it_starts_how_far_it_is_and_how_it_ended():
    out = io.StringIO()
    steps = Steps(3, out=out)
    with steps.step("html", "building the site"):
        pass
    with pytest.raises(RuntimeError), steps.step("pdf"):
        raise RuntimeError("no browser")
    with steps.step("last"):
        pass
    lines = out.getvalue().splitlines()
    assert lines[0] == "[1/3] html: building the site"
    assert re.fullmatch(DONE, lines[1]).groups() == ("1", "3", "html")
    assert lines[2] == "[2/3] pdf: started"
    assert re.fullmatch(r"\[2/3\] pdf: failed after \d+ s", lines[3])
    assert lines[4] == "[3/3] last: started" and re.fullmatch(DONE, lines[5]).group(1) == "3"
    assert len(lines) == 6


def test_a_negative_number_of_steps_is_refused():
    with pytest.raises(ValueError, match="total=-1"):
        Steps(-1)


def test_the_build_announces_each_step_and_stops_at_the_first_failure(monkeypatch, capfd):
    plan = [("html", [sys.executable, "-c", "pass"]), ("html-zh", [sys.executable, "-c", "raise SystemExit(3)"])]
    plan.append(("pdf", [sys.executable, "-c", "pass"]))
    monkeypatch.setattr(build, "steps", lambda root, path_output, pdf: plan)
    assert build.main([]) == 3
    lines = capfd.readouterr().err.splitlines()
    assert lines[0] == f"[1/3] html: {build.DOING['html']}" and re.fullmatch(DONE, lines[1])
    assert lines[2] == f"[2/3] html-zh: {build.DOING['html-zh']}"
    assert re.fullmatch(r"\[2/3\] html-zh: failed after \d+ s", lines[3])
    assert len(lines) == 4, "the PDF step ran after a failed build"


def test_every_build_step_has_its_words():
    names = [name for name, _ in build.steps(build.ROOT, pdf=True)]
    assert names == list(build.DOING)


def test_execute_announces_each_notebook_before_it_runs(tmp_path, capsys):
    paths = []
    for name in ("a", "b"):
        nb = new_notebook(cells=[new_code_cell("print(1 + 1)")])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        paths.append(tmp_path / f"{name}.ipynb")
        nbformat.write(nb, paths[-1])
    assert main(["execute", *map(str, paths)]) == 0
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert err[0] == f"[1/2] {paths[0]}: executing" and re.fullmatch(DONE, err[1]).group(3) == str(paths[0])
    assert err[2] == f"[2/2] {paths[1]}: executing" and re.fullmatch(DONE, err[3]).group(3) == str(paths[1])
    assert [line.split(":")[0] for line in captured.out.splitlines()] == [str(p) for p in paths]


def test_progress_reaches_a_log_that_is_not_a_terminal(tmp_path):
    """Piped to a file, as in CI: each line is there as soon as its step starts (flushed), not at the end."""
    script = (
        "import time\nfrom course_embed.tools.progress import Steps\nsteps = Steps(1)\n"
        "with steps.step('wait', 'waiting'):\n    time.sleep(30)\n"
    )
    log = tmp_path / "log"
    with log.open("w") as sink:
        child = subprocess.Popen([sys.executable, "-c", script], stderr=sink)
        try:
            for _ in range(3000):  # the child imports torch first: up to 5 min on a loaded machine
                if log.read_text() or child.poll() is not None:
                    break
                time.sleep(0.1)
            assert log.read_text() == "[1/1] wait: waiting\n"
            assert child.poll() is None, "the line came only when the step ended"
        finally:
            child.kill()
            child.wait()
