"""Run chapter 5's length-generalisation study and write its results as JSON.

    python3 scripts/extrapolation.py                                # the full study -> book/data/extrapolation.json
    python3 scripts/extrapolation.py --quick --out /tmp/quick.json  # a reduced run of the same code (tests run this)

Byte-level causal LMs that differ only in their position scheme (NoPE, sinusoidal, learned, RoPE at several bases,
ALiBi, T5 bias), several seeds each, are trained on CPython's own ``pydoc_data`` help texts at one length and
measured at 1x to 8x that length; the RoPE model with the standard base is then extended (position interpolation,
NTK, dynamic NTK, YaRN and YaRN's two ingredients) zero-shot and after a short fine-tune. See
``course_embed/lab/extrapolation.py``. Each (model, seed) task runs in its own process with one thread, so the
numbers do not depend on ``--jobs``. With the default ``--jobs 2`` on an otherwise idle two-core machine the full
study takes about 28 minutes; the recorded run took 32 minutes, and the file records its wall time, core count and
load average.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import time
from pathlib import Path

import numpy
import torch
from tqdm.auto import tqdm

import course_embed as ce
from course_embed.lab import corpus
from course_embed.lab.extrapolation import StudyConfig, config_dict, run_task

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "book" / "data" / "extrapolation.json"

#: The reduced run: the same code on a smaller model and budget, two seeds.
QUICK = dict(
    eval_lengths=(32, 64, 128),
    probe_lengths=(32, 64, 128),
    train_len=32,
    d_model=16,
    n_heads=2,
    n_layers=1,
    steps=6,
    batch_size=8,
    warmup=2,
    rope_bases=(100.0, 10000.0),
    seeds=(0, 1),
    eval_tokens=512,
    probe_sequences=4,
    finetune_steps=2,
)


def _rounded(value):
    """Floats to 6 significant digits, so the JSON diffs cleanly and holds no noise digits."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def _task(job: tuple[StudyConfig, str, int]) -> dict:
    cfg, name, seed = job
    torch.set_num_threads(1)
    ce.deterministic(seed)
    train, valid = corpus.split(corpus.corpus_bytes(), cfg.valid_fraction)
    return run_task(cfg, name, seed, train, valid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced configuration (seconds instead of minutes)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output JSON (default {DEFAULT_OUT})")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes, one thread each (default 2)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")

    cfg = StudyConfig(**QUICK) if args.quick else StudyConfig()
    data = corpus.corpus_bytes()
    train_ids, valid_ids = corpus.split(data, cfg.valid_fraction)
    jobs = [(cfg, name, seed) for seed in cfg.seeds for name in cfg.models()]
    jobs.sort(key=lambda job: not job[1].startswith("rope-"))  # the long RoPE tasks first
    start, load_before = time.perf_counter(), os.getloadavg()[0]
    with multiprocessing.get_context("spawn").Pool(min(args.jobs, len(jobs))) as pool:
        runs = list(tqdm(pool.imap_unordered(_task, jobs), total=len(jobs), desc="models", disable=args.no_progress))
    runs.sort(key=lambda run: (cfg.models().index(run["model"]), run["seed"]))
    payload = {
        "generated_by": "python3 scripts/extrapolation.py" + (" --quick" if args.quick else ""),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": numpy.__version__,
            "course_embed": ce.__version__,
        },
        "threads_per_task": 1,
        "jobs": args.jobs,
        "wall_seconds": round(time.perf_counter() - start),
        "load_average": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},  # 1 minute
        "cpu_count": os.cpu_count(),
        "corpus": {**corpus.corpus_info(data), "train_bytes": len(train_ids), "valid_bytes": len(valid_ids)},
        "config": config_dict(cfg),
        "models": cfg.models(),
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(_rounded(payload), indent=1) + "\n")
    print(f"wrote {args.out} in {payload['wall_seconds']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
