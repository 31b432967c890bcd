"""Embedding x sqrt(d) + sinusoidal positions: the textbook version against the package's paths, side by side.

    python benchmarks/input_layer.py [--device cpu] [--threads 2] [--rounds 11]

Variants (forward, no autograd graph, float32):
  textbook   emb(ids) * math.sqrt(d) + pe[:s], nn.Embedding and a precomputed table (three passes, three buffers)
  gather     F.embedding(ids, W) alone: the bare lookup, a floor for any eager version
  package    TransformerEmbedding (default eager path: id check, gather, one in-place add with the scale folded in)
  compiled   TransformerEmbedding(compile=True): torch.compile of the same computation, one fused loop
  copy       a copy moving the same minimum bytes, itemsize * (2 b s d + s d)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

import course_embed as ce
from course_embed.lab import bench
from course_embed.checks import check_ids

from common import machine, parse

SHAPES = [(32, 128, 512, 10_000), (8, 512, 768, 32_000), (1, 4096, 1024, 50_000)]


def tables(device: str, threads: int, rounds: int) -> list[str]:
    out = []
    for b, s, d, v in SHAPES:
        gen = torch.Generator().manual_seed(0)
        package = ce.TransformerEmbedding(v, d, dropout=0.0, max_len=s, device=device).eval()
        compiled = ce.TransformerEmbedding(v, d, dropout=0.0, max_len=s, device=device, compile=True).eval()
        compiled.load_state_dict(package.state_dict())
        emb = nn.Embedding(v, d, device=device)
        with torch.no_grad():
            emb.weight.copy_(package.token.weight)
        pe = ce.sinusoidal_table(s, d, device=device)
        ids = torch.randint(0, v, (b, s), generator=gen).to(device)
        with torch.no_grad():
            expected = emb(ids) * math.sqrt(d) + pe[:s]
            for model in (package, compiled):  # also compiles, before any timing
                torch.testing.assert_close(model(ids), expected, rtol=1e-6, atol=1e-5)
            table = bench.compare({
                "textbook": lambda: emb(ids) * math.sqrt(d) + pe[:s],
                "gather": lambda: F.embedding(ids, emb.weight),
                "package": lambda: package(ids),
                "compiled": lambda: compiled(ids),
            }, bench.embedding_bytes(b, s, d, 4), baseline="textbook", device=device, threads=threads, rounds=rounds,
                title=f"embedding x sqrt(d) + sinusoidal, (b, s, d) = ({b}, {s}, {d}), V = {v}")
            check = bench.compare({"check_ids": lambda: check_ids(ids, v), "package": lambda: package(ids)},
                                  bench.embedding_bytes(b, s, d, 4), baseline="package", device=device,
                                  threads=threads, rounds=rounds)
        eager, gather = table.row("package").seconds, table.row("gather").seconds
        out.append(table.format() + "\n" + (
            f"package eager: {table.speedup('package'):.2f}x textbook (goal >= 2), {eager / gather:.2f}x the bare "
            f"gather's time (goal <= 1.5); compiled: {table.speedup('compiled'):.2f}x textbook; id check: "
            f"{check.row('check_ids').seconds / check.row('package').seconds:.1%} of the package's time\n"))
    return out


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    print(machine())
    for device in args.device:
        for text in tables(device, args.threads, args.rounds):
            print(text, flush=True)


if __name__ == "__main__":
    main()
