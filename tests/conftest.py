"""Shared fixtures: seeded generators and the devices to run on (CPU always, CUDA when available)."""

import subprocess
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
    """Result of one site build, step by step as ``course_embed.tools.build`` runs it: the HTML folder, and the
    return code and log of each step (``html``: the English site; ``html-zh``: the Chinese edition in ``zh/``;
    ``pdf`` and ``pdf-zh``: their PDFs, which need the browser)."""

    def __init__(self, out: Path):
        self.html = out / "_build" / "html"
        self.zh = self.html / "zh"
        self.steps = {
            log.stem: (int(log.with_suffix(".returncode").read_text()), log.read_text()) for log in out.glob("*.log")
        }
        (self.returncode, self.log), (self.zh_returncode, self.zh_log) = self.steps["html"], self.steps["html-zh"]
        (self.pdf_returncode, self.pdf_log), (self.zh_pdf_returncode, self.zh_pdf_log) = (
            self.steps["pdf"],
            self.steps["pdf-zh"],
        )


@pytest.fixture(scope="session")
def built_site(tmp_path_factory, worker_id) -> BuiltSite:
    """Build the book once per test run (shared by xdist workers through a file lock), both editions and their PDFs,
    step by step as the README's first command does (``course_embed.tools.build.steps``: this interpreter's Jupyter
    Book, never from PATH), each step's log kept even when an earlier one failed."""
    from course_embed.tools import build

    root = Path(__file__).resolve().parents[1]
    run_temp = tmp_path_factory.getbasetemp()  # xdist workers get a folder inside this run's folder
    out = (run_temp if worker_id == "master" else run_temp.parent) / "site"
    with FileLock(str(out) + ".lock"):
        if not (out / "done").exists():
            out.mkdir(exist_ok=True)
            for name, command in build.steps(root, out):
                proc = subprocess.run(command, capture_output=True, text=True)
                (out / f"{name}.returncode").write_text(str(proc.returncode))
                (out / f"{name}.log").write_text(proc.stdout + proc.stderr)
            (out / "done").write_text("")
    return BuiltSite(out)
