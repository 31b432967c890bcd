"""Run chapter 5's length-extrapolation experiment and write its results as JSON.

    python scripts/extrapolation.py                               # the full experiment -> book/data/extrapolation.json
    python scripts/extrapolation.py --quick --out /tmp/quick.json # a reduced run of the same code (tests run this)

Five tiny causal Transformers that differ only in their position scheme (sinusoidal, learned, RoPE, ALiBi, T5
bias) learn the repeated-block task at one length and are evaluated at 1x, 2x, 4x and 8x that length; then the RoPE
model is extended with position interpolation, NTK and YaRN, without and with a short fine-tune. See
``course_embed/lab/extrapolation.py`` for the task and the model. The run is deterministic on the CPU for a given
seed and thread count; the full one takes minutes on two cores, the quick one seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

import course_embed as ce
from course_embed.lab.extrapolation import ExperimentConfig, run_experiment

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "book" / "data" / "extrapolation.json"

#: The reduced run: the same code on a smaller model, task and budget.
QUICK = dict(vocab_size=64, train_len=32, eval_factors=(1, 2, 4), d_model=32, n_heads=2, n_layers=1, steps=30,
             batch_size=16, warmup=5, eval_sequences=16, eval_batch_size=16, extension_factor=2, finetune_steps=5)


def _rounded(value):
    """Floats to 6 significant digits, so the JSON diffs cleanly and holds no noise digits."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced configuration (seconds instead of minutes)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output JSON (default {DEFAULT_OUT})")
    parser.add_argument("--seed", type=int, default=0, help="seed of initialisation and data (default 0)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1, the fastest for "
                        "models this small on a busy machine; results can differ in the last digits with another count)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    args = parser.parse_args(argv)

    cfg = replace(ExperimentConfig(**(QUICK if args.quick else {})), seed=args.seed)
    torch.set_num_threads(args.threads)
    ce.deterministic(cfg.seed)
    results = run_experiment(cfg, progress=not args.no_progress, device="cpu")
    payload = {"generated_by": "python scripts/extrapolation.py" + (" --quick" if args.quick else ""),
               "torch": torch.__version__, "threads": args.threads, **results.to_dict()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(_rounded(payload), indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
