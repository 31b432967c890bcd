"""RoPE and ALiBi, the package's versions against the textbook ones, side by side.

    python benchmarks/attention_positions.py [--device cpu] [--threads 1] [--rounds 11] [--no-compile] [--quick]

RoPE on q and k, each of shape (b, h, s, h_d) = (8, 12, 1024, 64), forward, in float32 and in bfloat16:
  rotate_half   q * cos + rotate_half(q) * sin (and k) with (s, h_d) tables computed beforehand (the GPT-NeoX /
                Hugging Face formulation)
  compiled_half torch.compile of that expression (one fused loop), unless --no-compile
  package       RotaryEmbedding(64)(q, k), the interleaved layout: cos and sin of the call's positions computed in
                the call (float64 angles, rounded to float32, then to the inputs' dtype), then per tensor two
                half-width products and two multiply-adds on the even and odd dims, and a stack that interleaves them
  package_half  RotaryEmbedding(64, layout="half")(q, k): the same, on the two halves of the head dim, then a
                concatenation
  copy          a copy moving the minimum bytes itemsize * (2 b h s h_d + 2 s h_d), h the heads of q and k together

ALiBi on attention scores (b, h, s, s) = (1, 12, 1024, 1024):
  materialised  scores + bias with a full (h, s, s) bias, built beforehand ("apply") or per call ("build + apply")
  key_only      scores + bias with the (h, 1, s) key-only bias (same softmax for causal queries)

Every table comes from course_embed.lab.bench.compare, the baseline timed twice for the noise floor under it.
"""

from __future__ import annotations

import torch

import course_embed as ce
from course_embed.lab import bench

from common import hf_cos_sin, machine, parse, rotate_half


def rope_table(
    device: str, threads: int, rounds: int, dtype: torch.dtype, compiled_too: bool, quick: bool, block_seconds: float
) -> str:
    b, h, s, hd = (1, 2, 16, 8) if quick else (8, 12, 1024, 64)
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(b, h, s, hd, generator=gen).to(device=device, dtype=dtype) for _ in range(2))
    rope = ce.RotaryEmbedding(hd, device=device)
    rope_half = ce.RotaryEmbedding(hd, layout="half", device=device)
    cos, sin = hf_cos_sin(s, hd, device, dtype)  # (s, h_d) each, the rotate_half layout's tables

    def textbook(q, k):
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    variants = {
        "rotate_half": lambda: textbook(q, k),
        "package": lambda: rope(q, k),
        "package_half": lambda: rope_half(q, k),
    }
    if compiled_too:
        compiled = torch.compile(textbook, dynamic=False)
        variants["compiled_half"] = lambda: compiled(q, k)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    with torch.no_grad():
        for name in ("package_half", "compiled_half"):
            if name in variants:  # also compiles, before any timing
                torch.testing.assert_close(variants[name](), textbook(q, k), rtol=tol, atol=tol)
        table = bench.compare(
            variants,
            bench.rope_bytes(b, 2 * h, s, hd, q.element_size()),
            baseline="rotate_half",
            device=device,
            dtype=dtype,
            threads=threads,
            rounds=rounds,
            block_seconds=block_seconds,
            title=f"RoPE on q and k, (b, h, s, h_d) = ({b}, {h}, {s}, {hd}) each, {dtype}",
        )
    return table.format() + "\n"


def alibi_tables(device: str, threads: int, rounds: int, quick: bool, block_seconds: float) -> str:
    b, h, s = (1, 2, 16) if quick else (1, 12, 1024)
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
        apply = bench.compare(
            {"materialised": lambda: scores + full, "key_only": lambda: scores + key_only},
            nbytes,
            baseline="materialised",
            device=device,
            threads=threads,
            rounds=rounds,
            block_seconds=block_seconds,
            title=f"ALiBi apply: scores (b, h, s, s) = ({b}, {h}, {s}, {s}) + bias",
        )
        build = bench.compare(
            {
                "materialised": lambda: scores + ce.alibi_bias(slopes, s, query_len=s),
                "key_only": lambda: scores + ce.alibi_bias(slopes, s),
            },
            nbytes,
            baseline="materialised",
            device=device,
            threads=threads,
            rounds=rounds,
            block_seconds=block_seconds,
            title="ALiBi build + apply",
        )
    memory = (
        f"bias memory: materialised (h, s, s) {bench.tensor_bytes(full) / 2**20:.1f} MiB, key-only (h, 1, s) "
        f"{bench.tensor_bytes(key_only) / 2**10:.1f} KiB ({bench.tensor_bytes(full) // bench.tensor_bytes(key_only)}x "
        f"less)"
    )

    def paired(table, what):  # the median of the per-round ratios, as in the table, with its interval
        mid, low, high = table.ratio_ci("materialised", "key_only")
        return f"key-only {what}: {mid:.2f}x [{low:.2f}, {high:.2f}] ({table.interval_label})"

    return "\n".join(
        [
            apply.format(),
            paired(apply, "on apply"),
            "",
            build.format(),
            paired(build, "on build + apply"),
            memory,
            "",
        ]
    )


def main() -> None:
    args = parse(
        __doc__.splitlines()[0],
        extra=[("--no-compile", {"action": "store_true", "help": "skip torch.compile (no C++ compiler)"})],
    )
    print(machine())
    for device in args.device:
        for dtype in (torch.float32, torch.bfloat16):
            table = rope_table(
                device, args.threads, args.rounds, dtype, not args.no_compile, args.quick, args.block_seconds
            )
            print(table, flush=True)
        print(alibi_tables(device, args.threads, args.rounds, args.quick, args.block_seconds), flush=True)


if __name__ == "__main__":
    main()
