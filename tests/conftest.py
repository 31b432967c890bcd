"""Shared fixtures: seeded generators and the devices to run on (CPU always, CUDA when available)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from filelock import FileLock

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """Every test that takes ``device`` runs on CPU, and on CUDA when a GPU is present."""
    return torch.device(request.param)


@pytest.fixture
def gen() -> torch.Generator:
    """A CPU generator with a fixed seed, for random inputs."""
    return torch.Generator().manual_seed(1234)


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``cuda`` when no GPU is present."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config):
    """Say which browser the site tests drive (tests/tools/test_site.py), and how to choose another."""
    from course_embed.tools import browser

    try:
        found = browser.find_browser()
    except browser.BrowserNotFound as error:
        return f"browser for the site tests: none ({error})"
    return f"browser for the site tests: {found} (set {browser.ENV} to use another)"


class BuiltSite:
    """Result of one site build: the HTML folder, the return code and log of `jupyter-book build`, and those of
    printing the book to PDF (``course_embed.tools.pdf``, which needs the browser)."""

    def __init__(self, out: Path):
        self.html = out / "_build" / "html"
        self.returncode, self.log = int((out / "returncode").read_text()), (out / "build.log").read_text()
        self.pdf_returncode = int((out / "pdf-returncode").read_text())
        self.pdf_log = (out / "pdf.log").read_text()


@pytest.fixture(scope="session")
def built_site(tmp_path_factory, worker_id) -> BuiltSite:
    """Build the book once per test run (shared by xdist workers through a file lock), with the Jupyter Book of
    this interpreter (never from PATH), the way the README's first command does; then print its PDF."""
    from course_embed.tools import build

    root = Path(__file__).resolve().parents[1]
    run_temp = tmp_path_factory.getbasetemp()  # xdist workers get a folder inside this run's folder
    out = (run_temp if worker_id == "master" else run_temp.parent) / "site"
    with FileLock(str(out) + ".lock"):
        if not (out / "pdf.log").exists():
            out.mkdir(exist_ok=True)
            proc = subprocess.run(build.jupyter_book_command(root, out), capture_output=True, text=True)
            (out / "returncode").write_text(str(proc.returncode))
            (out / "build.log").write_text(proc.stdout + proc.stderr)
            pdf = subprocess.run(
                [sys.executable, "-m", "course_embed.tools.pdf", str(out / "_build" / "html")],
                capture_output=True,
                text=True,
            )
            (out / "pdf-returncode").write_text(str(pdf.returncode))
            (out / "pdf.log").write_text(pdf.stdout + pdf.stderr)
    return BuiltSite(out)
