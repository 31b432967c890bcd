"""Decoding steps under each RoPE scaling: cost per step at each position, against an unscaled RotaryEmbedding at
the same positions; and the memory each module holds between calls.

    python benchmarks/decode.py [--threads 1] [--rounds 11]

Each module first rotates a prompt of 2048 tokens, then decodes one token at a time (q (1, 32, 1, 128), k (1, 8,
1, 128), float32, inference) through positions around every boundary an older, table-based RotaryEmbedding had: the
end of the prompt, the original length L0 = 8192 (where dynamic NTK and LongRoPE change frequencies), and far
positions up to 2**17 + 2. The module keeps no cos/sin tables (every call computes the angles of its own positions),
so a step past the prompt should cost what a step inside it costs. Every step is timed alone (a step that crosses a
boundary happens once, so it cannot be averaged away); each round decodes the whole schedule on fresh modules, in
shuffled module order, and the table reports per-position medians. Goals: no step costs more than 5x the unscaled
step at the same position, and a step past the prompt is within 1.1x of a step inside it.
"""

from __future__ import annotations

import random
import statistics
import time

import torch

import course_embed as ce

from common import machine, parse, seconds

L0, PROMPT = 8192, 2048
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
    "dynamic (transformers rule)": {"rope_type": "dynamic", "factor": 16.0, "original_max_position_embeddings": L0},
}
POSITIONS = [
    *range(PROMPT - 2, PROMPT + 3),  # the prompt ends at PROMPT
    *range(L0 - 2, L0 + 3),  # the original length
    32_767, 32_768, 32_769, 131_071, 131_072, 131_073,
]  # fmt: skip


def build(name: str) -> ce.RotaryEmbedding:
    rule = "transformers" if "transformers" in name else "paper"
    return ce.RotaryEmbedding(128, 500000.0, layout="half", rope_scaling=SCALINGS[name], dynamic_rule=rule)


def table_bytes(rope: ce.RotaryEmbedding) -> int:
    """What the module holds between calls: its frequency buffers (there are no cos/sin tables)."""
    return sum(t.untyped_storage().nbytes() for t in rope.buffers())


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    print(machine())
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 32, 1, 128, generator=gen), torch.randn(1, 8, 1, 128, generator=gen)
    prompt_q, prompt_k = torch.randn(1, 32, PROMPT, 128, generator=gen), torch.randn(1, 8, PROMPT, 128, generator=gen)
    steps = {name: {p: [] for p in POSITIONS} for name in SCALINGS}
    memory = {}
    names = list(SCALINGS)
    with torch.inference_mode():
        for round_ in range(args.rounds):
            random.Random(round_).shuffle(names)
            for name in names:
                rope = build(name)
                rope(prompt_q, prompt_k)
                rope(q, k, offset=PROMPT - 3)  # untimed: the first step after a prompt pays one-off costs
                for position in POSITIONS:
                    start = time.perf_counter()
                    rope(q, k, offset=position)
                    steps[name][position].append(time.perf_counter() - start)
                memory[name] = table_bytes(rope)
    base = {p: statistics.median(steps["none"][p]) for p in POSITIONS}
    print(f"decoding steps, q (1, 32, 1, 128), k (1, 8, 1, 128), float32; prompt {PROMPT}, L0 {L0}")
    print(
        f"{'scaling':<28} {'median step':>11} {'step at worst':>13} {'at':>7} {'worst / unscaled':>17} {'buffers':>11}"
    )
    for name in SCALINGS:
        medians = {p: statistics.median(steps[name][p]) for p in POSITIONS}
        worst = max(POSITIONS, key=lambda p: medians[p] / base[p])
        print(
            f"{name:<28} {seconds(statistics.median(medians.values())):>11} {seconds(medians[worst]):>13} "
            f"{worst:>7} {medians[worst] / base[worst]:16.2f}x {memory[name] / 2**10:7.2f} KiB"
        )
    inside = statistics.median(base[p] for p in POSITIONS if p < PROMPT)
    past = statistics.median(base[p] for p in POSITIONS if p >= PROMPT)
    print(f"unscaled step past the prompt / inside it: {past / inside:.2f}x (goal: <= 1.1x)")
    print("per position, ratio to the unscaled step:")
    print("position " + " ".join(f"{n[:10]:>10}" for n in SCALINGS))
    for p in POSITIONS:
        print(f"{p:>8} " + " ".join(f"{statistics.median(steps[n][p]) / base[p]:10.2f}" for n in SCALINGS))


if __name__ == "__main__":
    main()
