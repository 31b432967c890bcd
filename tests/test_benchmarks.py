"""Each benchmark script runs end to end at tiny sizes (``--quick``), so that none breaks unnoticed when the package
changes. Nothing here looks at a timing: only that the script finishes and prints its tables with their noise floor."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# script -> what its output must contain
SCRIPTS = {
    "rope.py": ["noise floor (hf / hf'", "goal: not judged (--no-compile"],
    "decode.py": ["noise floor (none / none'", "goal: no step > 5x the unscaled step", "bytes held in buffers"],
    "attention_positions.py": ["noise floor (rotate_half / rotate_half'", "torch.bfloat16", "key-only on apply"],
    "input_layer.py": ["noise floor (textbook / textbook'", "package eager:", "one-pass: two-pass", "id check:"],
    "roofline.py": ["GB/s", "ridge point"],
    "training.py": ["one training step of TinyGPT", "noise floor (float32 / float32'", "2 processes, gloo"],
}
NO_COMPILE = {"attention_positions.py", "input_layer.py", "rope.py"}  # compiling takes minutes on a busy CPU
NOT_RUN = {"grading.py"}  # not run here: it grades notebooks in sandboxes, as tests/tools/test_grading*.py do


def run_quick(script: str, *extra: str) -> str:
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--quick", "--device", "cpu", *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"{script} --quick failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result.stdout


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_script_runs_quick(script):
    out = run_quick(script, *(["--no-compile"] if script in NO_COMPILE else []))
    assert out.splitlines()[0].count("torch") == 1  # the machine line comes first
    assert "median of 3 rounds" in out or script == "roofline.py"  # a sweep, not a comparison
    for expected in SCRIPTS[script]:
        assert expected in out, f"{script}: {expected!r} missing from\n{out}"


def test_every_script_is_covered():
    """A new script gets a quick run here (or a reason in NOT_RUN)."""
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*.py")} - {"common.py"}
    assert scripts == set(SCRIPTS) | NOT_RUN
