"""ruff, configured in pyproject.toml ([tool.ruff]), finds nothing to report or reformat in the Python code."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    # --no-cache: the test leaves no .ruff_cache behind (as pytest runs with -p no:cacheprovider)
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_ruff_check_finds_nothing():
    result = _ruff("check", "--output-format", "concise")
    assert result.returncode == 0, (
        f"ruff check found problems; fix them (`python3 -m ruff check --fix .` fixes "
        f"some):\n{result.stdout}{result.stderr}"
    )


def test_ruff_format_changes_nothing():
    result = _ruff("format", "--check")
    assert result.returncode == 0, f"run `python3 -m ruff format .`:\n{result.stdout}{result.stderr}"
