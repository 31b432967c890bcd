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


class BuiltSite:
    """Result of one `jupyter-book build`: the HTML folder, the return code and the full log."""

    def __init__(self, html: Path, returncode: int, log: str):
        self.html, self.returncode, self.log = html, returncode, log


@pytest.fixture(scope="session")
def built_site(tmp_path_factory, worker_id) -> BuiltSite:
    """Build the book once per test run (shared by xdist workers through a file lock)."""
    root = Path(__file__).resolve().parents[1]
    run_temp = tmp_path_factory.getbasetemp()  # xdist workers get a folder inside this run's folder
    out = (run_temp if worker_id == "master" else run_temp.parent) / "site"
    with FileLock(str(out) + ".lock"):
        log_file = out / "build.log"
        if not log_file.exists():
            out.mkdir(exist_ok=True)
            proc = subprocess.run(["jupyter-book", "build", str(root), "-W", "-n", "--keep-going",
                                   "--path-output", str(out)], capture_output=True, text=True)
            (out / "returncode").write_text(str(proc.returncode))
            log_file.write_text(proc.stdout + proc.stderr)
    return BuiltSite(out / "_build" / "html", int((out / "returncode").read_text()), log_file.read_text())
