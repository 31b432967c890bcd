"""RoPE on q and k, both layouts, against Hugging Face's rotate_half formula and a same-size copy, side by side.

    python benchmarks/rope.py [--device cpu] [--threads 1] [--rounds 11] [--no-compile] [--quick]

Variants (forward under torch.inference_mode(), float32, q and k of shape (1, h, s, h_d) each):
  hf            q * cos + rotate_half(q) * sin (and k), HF LLaMA's formula, with cos/sin (s, h_d) computed beforehand
  hf'           the same callable again: its ratio to hf is the run's noise floor (1 by construction)
  half          RotaryEmbedding(h_d, layout="half")(q, k): cos and sin of the call's positions computed in the call
                (float64 angles rounded to float32), then per tensor two half-width products, two multiply-adds and
                a concatenation
  interleaved   RotaryEmbedding(h_d, layout="interleaved")(q, k): the same cos and sin, then one complex
                multiplication per tensor (the pairs (x_2i, x_2i+1) seen as complex numbers, a view, no copy)
  half compiled, interleaved compiled
                the same modules under torch.compile (Inductor; compiled and run twice before timing), unless
                --no-compile
  hf compiled   hf's expression under torch.compile, its tables still computed beforehand
  half given, interleaved given
                course_embed.rotary.apply_rotary on q and k in one compiled call, with the layout's cos and sin
                computed beforehand by RotaryEmbedding.cos_sin: what a model that computes them once per forward
                and shares them across its layers, as transformers does, pays per layer; the compiled rows above
                minus these are the price of computing cos and sin in every call
  clone compiled
                q.clone() and k.clone() in one compiled call (the copy's bytes less the tables'): its time over the
                copy's is the fixed cost of calling compiled code, which small shapes feel
  copy          a copy moving the same minimum bytes, 4 (2 b h s h_d + 2 s h_d) with h the heads of q and k together
The package's layouts pay for their cos and sin in every call; hf does not (its tables are built once, outside the
timed call). Timed with course_embed.lab.bench.compare: interleaved rounds in shuffled order, speed-ups as the
median of the paired per-round ratios with a distribution-free 95% interval, the noise floor under each table.
"of copy" is copy time / variant time (all move the same bytes); the goal, both layouts >= 60% of the copy's
speed once compiled, is judged on the intervals of the compiled rows, the module's call and cos and sin given: met
where the low end clears 60%, not met where the high end is below. (Eager, each product and sum is a pass of its
own over memory; the eager rows show that.)
"""

from __future__ import annotations

import functools

import torch

import course_embed as ce
from course_embed.lab import bench
from course_embed.rotary import apply_rotary

from common import hf_cos_sin, machine, parse, rotate_half

SHAPES = [(32, 2048, 128), (8, 512, 64)]  # heads, sequence, head dim
QUICK_SHAPES = [(2, 16, 8)]


def rotate_both(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> tuple:
    return apply_rotary(q, cos, sin, layout), apply_rotary(k, cos, sin, layout)


def goal(table: bench.BenchTable, name: str) -> str:
    mid, low, high = table.ratio_ci(bench.COPY, name)  # copy time / variant time, per round
    verdict = "met" if low >= 0.6 else "not met" if high < 0.6 else "not established"
    return f"{name} {mid:.0%} of copy [{low:.0%}, {high:.0%}]: {verdict}"


def one_shape(
    heads: int, s: int, d: int, device: str, threads: int, rounds: int, block_seconds: float, compile: bool
) -> str:
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, heads, s, d, generator=gen).to(device) for _ in range(2))
    half = ce.RotaryEmbedding(d, layout="half", device=device)
    interleaved = ce.RotaryEmbedding(d, layout="interleaved", device=device)
    cos, sin = hf_cos_sin(s, d, device)  # (s, h_d) each, as HF's rotary module returns them
    variants = {
        "hf": lambda: (q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin),
        "half": lambda: half(q, k),
        "interleaved": lambda: interleaved(q, k),
    }
    layouts = ("half", "interleaved")
    compiled = {f"{name} compiled": torch.compile(variants[name]) for name in ("hf", *layouts)} if compile else {}
    rotate, positions = torch.compile(rotate_both), torch.arange(s, device=device)[None]
    given = (
        {  # cos and sin (1, 1, s, h_d / 2) each, computed here, outside the timed call
            f"{rope.layout} given": functools.partial(rotate, q, k, *rope.cos_sin(positions), rope.layout)
            for rope in (half, interleaved)
        }
        if compile
        else {}
    )
    with torch.inference_mode():
        for name, call in compiled.items() | given.items():
            for _ in range(2):  # compile, then one run of the compiled code
                reference = variants[name.removesuffix(" compiled").removesuffix(" given")]()
                torch.testing.assert_close(call(), reference, rtol=1e-5, atol=1e-5)
        variants |= compiled | given
        if compile:
            clone = torch.compile(lambda q, k: (q.clone(), k.clone()))
            for _ in range(2):
                clone(q, k)
            variants["clone compiled"] = lambda: clone(q, k)
        hf_q, hf_k = variants["hf"]()
        torch.testing.assert_close(half(q, k), (hf_q, hf_k), rtol=1e-5, atol=1e-5)
        perm = torch.arange(d, device=device).view(2, d // 2).T.flatten()  # dims i and i + h_d/2 side by side
        torch.testing.assert_close(
            interleaved(q[..., perm], k[..., perm]), (hf_q[..., perm], hf_k[..., perm]), rtol=1e-5, atol=1e-5
        )
        table = bench.compare(
            variants,
            bench.rope_bytes(1, 2 * heads, s, d, q.element_size()),
            baseline="hf",
            device=device,
            threads=threads,
            rounds=rounds,
            block_seconds=block_seconds,
            title=f"RoPE on q and k, (b, h, s, h_d) = (1, {heads}, {s}, {d}) each, float32, inference",
        )
    if not compile:
        return f"{table.format()}\ngoal: not judged (--no-compile: the goal is on the compiled rows)\n"
    verdicts = "; ".join(goal(table, f"{name} {how}") for how in ("compiled", "given") for name in layouts)
    return f"{table.format()}\ngoal: both layouts, compiled, >= 60% of copy ({table.interval_label}): {verdicts}\n"


def main() -> None:
    args = parse(
        __doc__.splitlines()[0],
        extra=[("--no-compile", {"action": "store_true", "help": "skip torch.compile (no C++ compiler)"})],
    )
    print(machine())
    for device in args.device:
        for heads, s, d in QUICK_SHAPES if args.quick else SHAPES:
            table = one_shape(heads, s, d, device, args.threads, args.rounds, args.block_seconds, not args.no_compile)
            print(table, flush=True)


if __name__ == "__main__":
    main()
