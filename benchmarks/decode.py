"""Decoding steps under each RoPE scaling, against an unscaled RotaryEmbedding at the same position, side by side.

    python benchmarks/decode.py [--device cpu] [--threads 1] [--rounds 11] [--quick]

One decoding step rotates one token: q (1, 32, 1, 128) and k (1, 8, 1, 128), float32, inference, at position
``offset`` (the tokens already in the KV cache), with RotaryEmbedding(128, 500000, layout="half", rope_scaling=...).
The module keeps no tables: every call computes the cos and sin of its own positions from the frequencies, so the
cost of a step does not grow with the position, and no step rebuilds anything. What can differ is the frequencies
a call uses: dynamic NTK computes a new base from the call's length past the original length L0 = 8192 (the
"transformers" rule also updates the longest length seen), LongRoPE switches to its long factors past L0. So one
table per position: below L0 (2047), the first position past L0 (8192) and far past it (131072).

Each table comes from course_embed.lab.bench.compare (interleaved rounds in shuffled order; each round times a
block of steps); the baseline is the unscaled module ("none"), timed twice for the noise floor. A step is not
bandwidth-bound (a few KB), so the table has no copy and no GB/s. The goal, no step costs more than 5x the unscaled
step at the same position, is judged on the interval of time(scaling) / time(none): met in this run where every
upper end is at most 5. The last line gives the bytes each module holds in buffers (its frequencies and state).
"""

from __future__ import annotations

import torch

import course_embed as ce
from course_embed.lab import bench

from common import machine, parse

L0 = 8192
SCALINGS = {
    "none": None,
    "linear": {"rope_type": "linear", "factor": 16.0},
    "yarn": {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": L0},
    "llama3": {
        "rope_type": "llama3",
        "factor": 16.0,
        "original_max_position_embeddings": L0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    },
    "longrope": {
        "rope_type": "longrope",
        "factor": 16.0,
        "original_max_position_embeddings": L0,
        "short_factor": [1.0] * 64,
        "long_factor": [float(1 + i / 4) for i in range(64)],
    },
    "dynamic": {"rope_type": "dynamic", "factor": 16.0, "original_max_position_embeddings": L0},
    "dynamic (transformers)": {"rope_type": "dynamic", "factor": 16.0, "original_max_position_embeddings": L0},
}
POSITIONS = [2047, L0, 131_072]
QUICK_POSITIONS = [2047, L0]


def build(name: str, device: str) -> ce.RotaryEmbedding:
    rule = "transformers" if "transformers" in name else "paper"
    return ce.RotaryEmbedding(
        128, 500000.0, layout="half", rope_scaling=SCALINGS[name], dynamic_rule=rule, device=device
    )


def state_bytes(rope: ce.RotaryEmbedding) -> int:
    return sum(bench.tensor_bytes(b) for b in rope.buffers())


def one_position(
    position: int, modules: dict, q, k, device: str, threads: int, rounds: int, block_seconds: float
) -> tuple[str, float, float]:
    variants = {name: (lambda rope=rope: rope(q, k, offset=position)) for name, rope in modules.items()}
    with torch.inference_mode():
        table = bench.compare(
            variants,
            None,
            baseline="none",
            device=device,
            threads=threads,
            rounds=rounds,
            block_seconds=block_seconds,
            title=f"one decoding step at position {position}, q (1, 32, 1, 128), k (1, 8, 1, 128), float32",
        )
    costs = {name: table.ratio_ci(name, "none") for name in modules if name != "none"}  # time(name) / time(none)
    worst = max(costs, key=lambda name: costs[name][2])
    mid, low, high = costs[worst]
    line = f"highest step cost against none: {worst} {mid:.2f}x [{low:.2f}, {high:.2f}] ({table.interval_label})"
    return f"{table.format()}\n{line}\n", max(c[1] for c in costs.values()), high


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    print(machine())
    for device in args.device:
        gen = torch.Generator().manual_seed(0)
        q = torch.randn(1, 32, 1, 128, generator=gen).to(device)
        k = torch.randn(1, 8, 1, 128, generator=gen).to(device)
        modules = {name: build(name, device) for name in SCALINGS}
        lows, highs = [], []
        for position in QUICK_POSITIONS if args.quick else POSITIONS:
            text, low, high = one_position(
                position, modules, q, k, device, args.threads, args.rounds, args.block_seconds
            )
            lows.append(low)
            highs.append(high)
            print(text, flush=True)
        verdict = "met" if max(highs) <= 5 else "not met" if max(lows) > 5 else "not established"
        print(
            f"goal: no step > 5x the unscaled step at its position: {verdict} in this run "
            f"(highest upper end {max(highs):.2f}x)"
        )
        print(
            "bytes held in buffers: "
            + ", ".join(f"{name} {state_bytes(rope)}" for name, rope in modules.items())
            + "\n",
            flush=True,
        )


if __name__ == "__main__":
    main()
