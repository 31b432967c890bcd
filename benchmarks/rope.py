"""RoPE on q and k, both layouts, against a same-size copy and Hugging Face's rotate_half formula, side by side.

    python benchmarks/rope.py [--threads 1] [--rounds 11] [--no-compile]

Variants (float32, torch.inference_mode(), q and k of shape (1, h, s, h_d) each, cos/sin precomputed for all):
  copy          q.clone(), k.clone(): the same bytes moved with no arithmetic (the speed limit)
  hf            q * cos + rotate_half(q) * sin (and k), HF LLaMA's formula with cos/sin (s, h_d) precomputed
  half          RotaryEmbedding(layout="half"): one full-width product, two half-width multiply-adds
  interleaved   RotaryEmbedding(layout="interleaved"): adjacent pairs, the same multiply-adds
  ... compiled  the same module under torch.compile (fullgraph), which fuses cos/sin and the rotation
GB/s counts reading q and k and writing both results once (the tables are small next to them). "of copy" is
copy time / variant time (the goal: >= 60% for both layouts); "vs hf" is hf time / variant time.
"""

from __future__ import annotations

import torch

import course_embed as ce

from common import machine, parse, seconds, time_shuffled

SHAPES = [(32, 2048, 128), (8, 512, 64)]  # heads, sequence, head dim


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def one_shape(heads: int, s: int, d: int, rounds: int, compile: bool) -> str:
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, heads, s, d, generator=gen) for _ in range(2))
    half = ce.RotaryEmbedding(d, layout="half")
    interleaved = ce.RotaryEmbedding(d, layout="interleaved")
    cos, sin = (t[0, 0] for t in half.cos_sin(torch.arange(s)[None]))  # (s, p)
    cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)  # (s, h_d), as HF's rotary class returns them
    variants = {
        "copy": lambda: (q.clone(), k.clone()),
        "hf": lambda: (q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin),
        "half": lambda: half(q, k),
        "interleaved": lambda: interleaved(q, k),
    }
    if compile:
        for name, module in (("half", half), ("interleaved", interleaved)):
            compiled = torch.compile(module, fullgraph=True)
            variants[f"{name} compiled"] = lambda compiled=compiled: compiled(q, k)
    with torch.inference_mode():
        hf_q, _ = variants["hf"]()
        torch.testing.assert_close(half(q, k)[0], hf_q, rtol=1e-6, atol=1e-5)
        perm = ce.layout_permutation(d)
        torch.testing.assert_close(interleaved.rotate(q[..., perm]), hf_q[..., perm], rtol=1e-6, atol=1e-5)
        medians = time_shuffled(variants, rounds)
    nbytes = 4 * 4 * q.numel()  # read q and k, write both results
    lines = [
        f"RoPE on q and k, (b, h, s, h_d) = (1, {heads}, {s}, {d}), float32, inference",
        f"{'variant':<20} {'median':>9} {'GB/s':>7} {'of copy':>8} {'vs hf':>7}",
    ]
    for name, t in medians.items():
        lines.append(
            f"{name:<20} {seconds(t):>9} {nbytes / t / 1e9:7.1f} {medians['copy'] / t:8.0%} {medians['hf'] / t:6.2f}x"
        )
    goal = [f"{n} compiled" for n in ("half", "interleaved")] if compile else ["half", "interleaved"]
    verdict = ", ".join(f"{n} {medians['copy'] / medians[n]:.0%} of copy" for n in goal)
    lines.append(f"goal: both layouts >= 60% of copy: {verdict}\n")
    return "\n".join(lines)


def main() -> None:
    args = parse(__doc__.splitlines()[0], [("--no-compile", dict(action="store_true", help="skip torch.compile"))])
    print(machine())
    for heads, s, d in SHAPES:
        print(one_shape(heads, s, d, args.rounds, not args.no_compile), flush=True)


if __name__ == "__main__":
    main()
