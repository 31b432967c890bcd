"""Reading chapter 5's results file: per-model arrays over seeds, their spread, the heads that copy, and RoPE's
angle coverage.

Shapes: ``n`` seeds, ``k`` lengths (``eval_lengths`` or ``probe_lengths`` of the study's config), ``p`` RoPE pairs.
Missing values (a learned table past its length) are NaN.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


def load(path: str | Path) -> dict:
    """The results JSON written by ``scripts/extrapolation.py``."""
    return json.loads(Path(path).read_text())


def _array(rows: list[list[float | None]]) -> np.ndarray:
    return np.array([[np.nan if v is None else v for v in row] for row in rows], dtype=float)


def _seed_runs(results: dict, keep) -> list[dict]:
    """The runs for which ``keep(run)`` is true, in seed order."""
    return sorted((r for r in results["runs"] if keep(r)), key=lambda r: r["seed"])


def per_model(results: dict, key: str) -> dict[str, np.ndarray]:
    """``{model: (n, k) array}`` of measurement ``key`` (``"loss"``, ``"passkey"``, ...), seeds in order."""
    return {
        model: _array([r[key] for r in _seed_runs(results, lambda r, m=model: r["model"] == m)])
        for model in results["models"]
    }


def per_extension(results: dict, key: str, phase: str) -> dict[str, np.ndarray]:
    """``{method: (n, k) array}`` of ``key`` for the extended RoPE model, ``phase`` ``"zero_shot"`` or
    ``"finetuned"`` (methods without that phase are left out)."""
    runs = _seed_runs(results, lambda r: "extension" in r)
    methods = runs[0]["extension"] if runs else {}
    return {
        m: _array([r["extension"][m][phase][key] for r in runs]) for m in methods if phase in runs[0]["extension"][m]
    }


def tracked_head(results: dict, key: str, layer: int) -> dict[str, np.ndarray]:
    """``{model: (n, k) array}``: per seed, the head of ``layer`` with the largest ``key`` (``"induction"`` or
    ``"previous"``) at the first probe length (the training length), followed across the probe lengths."""
    out = {}
    for model in results["models"]:
        rows = []
        for run in _seed_runs(results, lambda r, m=model: r["model"] == m):
            head = int(np.argmax(run[key][0][layer]))
            rows.append([None if v is None else v[layer][head] for v in run[key]])
        out[model] = _array(rows)
    return out


def spread(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, minimum and maximum over seeds (axis 0) of an ``(n, k)`` array: three ``(k,)`` arrays."""
    return values.mean(0), values.min(0), values.max(0)


def angle_coverage(head_dim: int, base: float, train_len: int, test_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Per pair, the largest angle (in turns) RoPE gives a query-key distance in training (``train_len - 1``) and at
    test (``test_len - 1``): two ``(p,)`` arrays. A pair whose training value is below 1 never completed a turn,
    so every test angle above it is new to the model."""
    theta = base ** (-np.arange(0, head_dim, 2) / head_dim)
    return (train_len - 1) * theta / (2 * math.pi), (test_len - 1) * theta / (2 * math.pi)
