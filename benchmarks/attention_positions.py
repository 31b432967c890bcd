"""RoPE and ALiBi, the package's versions against the textbook ones, side by side.

    python benchmarks/attention_positions.py [--device cpu] [--threads 2] [--rounds 11]

RoPE on q of shape (b, h, s, h_d) = (8, 12, 1024, 64), float32, forward:
  rotate_half   q * cos + rotate_half(q) * sin with (s, h_d) tables (the GPT-NeoX / Hugging Face formulation)
  package       RotaryEmbedding(64).rotate(q): interleaved pairs as one complex multiplication
  package_half  RotaryEmbedding(64, layout="half").rotate(q): the rotate_half layout, in-place multiply-adds
  copy          a copy moving the minimum bytes itemsize * (2 b h s h_d + 2 s h_d)

ALiBi on attention scores (b, h, s, s) = (1, 12, 1024, 1024):
  materialised  scores + bias with a full (h, s, s) bias, built beforehand ("apply") or per call ("build + apply")
  key_only      scores + bias with the (h, 1, s) key-only bias (same softmax for causal queries)
"""

from __future__ import annotations

import torch

import course_embed as ce
from course_embed.lab import bench

from common import machine, parse


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_table(device: str, threads: int, rounds: int) -> str:
    b, h, s, hd = 8, 12, 1024, 64
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, s, hd, generator=gen).to(device)
    rope, rope_half = ce.RotaryEmbedding(hd), ce.RotaryEmbedding(hd, layout="half")
    angles = torch.arange(s, dtype=torch.float64)[:, None] * ce.rope_frequencies(hd)  # (s, h_d/2)
    angles = torch.cat((angles, angles), dim=-1)  # (s, h_d), the rotate_half layout's tables
    cos, sin = angles.cos().float().to(device), angles.sin().float().to(device)
    with torch.no_grad():
        torch.testing.assert_close(rope_half.rotate(q), q * cos + rotate_half(q) * sin, rtol=1e-5, atol=1e-5)
        table = bench.compare({
            "rotate_half": lambda: q * cos + rotate_half(q) * sin,
            "package": lambda: rope.rotate(q),
            "package_half": lambda: rope_half.rotate(q),
        }, bench.rope_bytes(b, h, s, hd, 4), baseline="rotate_half", device=device, threads=threads, rounds=rounds,
            title=f"RoPE on q (b, h, s, h_d) = ({b}, {h}, {s}, {hd})")
    return table.format() + (f"\npackage: {table.speedup('package'):.2f}x rotate_half (goal >= 6), "
                             f"{table.of_copy('package'):.0%} of copy (goal >= 75%)\n")


def alibi_tables(device: str, threads: int, rounds: int) -> str:
    b, h, s = 1, 12, 1024
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(b, h, s, s, generator=gen).to(device)
    slopes = ce.alibi_slopes(h, device=device)
    full, key_only = ce.alibi_bias(slopes, s, query_len=s), ce.alibi_bias(slopes, s)
    causal = torch.ones(s, s, dtype=torch.bool, device=device).tril()
    with torch.no_grad():
        a = torch.softmax((scores + full).masked_fill(~causal, float("-inf")), -1)
        k = torch.softmax((scores + key_only).masked_fill(~causal, float("-inf")), -1)
        torch.testing.assert_close(a, k, rtol=1e-4, atol=1e-4)  # large key-only biases round scores more
        nbytes = 4 * 2 * scores.numel()  # read the scores, write the biased scores; the bias itself is extra
        apply = bench.compare({"materialised": lambda: scores + full, "key_only": lambda: scores + key_only},
                              nbytes, baseline="materialised", device=device, threads=threads, rounds=rounds,
                              title=f"ALiBi apply: scores (b, h, s, s) = ({b}, {h}, {s}, {s}) + bias")
        build = bench.compare({
            "materialised": lambda: scores + ce.alibi_bias(slopes, s, query_len=s),
            "key_only": lambda: scores + ce.alibi_bias(slopes, s),
        }, nbytes, baseline="materialised", device=device, threads=threads, rounds=rounds,
            title="ALiBi build + apply")
    memory = (f"bias memory: materialised (h, s, s) {bench.tensor_bytes(full) / 2**20:.1f} MiB, key-only (h, 1, s) "
              f"{bench.tensor_bytes(key_only) / 2**10:.1f} KiB ({bench.tensor_bytes(full) // bench.tensor_bytes(key_only)}x "
              f"less)")
    return "\n".join([apply.format(), f"key-only: {apply.speedup('key_only'):.2f}x on apply", "", build.format(),
                      f"key-only: {build.speedup('key_only'):.2f}x on build + apply", memory, ""])


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    print(machine())
    for device in args.device:
        print(rope_table(device, args.threads, args.rounds), flush=True)
        print(alibi_tables(device, args.threads, args.rounds), flush=True)


if __name__ == "__main__":
    main()
