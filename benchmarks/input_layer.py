"""Embedding x sqrt(d) + sinusoidal positions: the textbook version against the package's paths, side by side.

    python benchmarks/input_layer.py [--device cpu] [--threads 1] [--rounds 11] [--no-compile] [--seed 0] [--quick]

Variants (forward under torch.inference_mode(), float32):
  textbook    emb(ids) * math.sqrt(d) + pe[:s], nn.Embedding and a precomputed table (three passes, three buffers)
  textbook'   the same callable again: its ratio to textbook is the run's noise floor (1 by construction)
  gather      F.embedding(ids, W) alone: the bare lookup (its GB/s counts its own bytes, 4 * 2 b s d)
  package     TransformerEmbedding, default eager path: id check, gather into the output, then one in-place add
              with the scale folded in (two passes: TokenEmbedding.lookup_add)
  two-pass    the same two passes without the layer around them (no id check, no module call)
  one-pass    the lab's OnePassEmbedding: id check, then one F.embedding_bag over token and position rows (chapter 6)
  compiled    TransformerEmbedding(compile=True): torch.compile of the textbook computation, one fused loop
  c-textbook  torch.compile of the whole textbook layer (nn.Embedding, the scale, the table add)
  c-package   torch.compile of the whole package layer: one graph, the id check inside it
  c-gather    torch.compile of the bare gather: how fast the compiler's indirect-load loop is on its own
  copy        a copy moving the same minimum bytes, itemsize * (2 b s d + s d)
Speed-ups are medians of the paired per-round ratios with a distribution-free 95% interval of that median
(course_embed.lab.bench.compare: every round in its own shuffled order, the textbook timed twice for the noise floor
printed under each table); --seed seeds the shuffles. Run the script a few times on a shared machine: a goal is met
when it clears in every run.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

import course_embed as ce
from course_embed.checks import check_ids
from course_embed.lab import bench, one_pass
from course_embed.token import _lookup_add

from common import machine, parse

SHAPES = [(32, 128, 512, 10_000), (8, 512, 768, 32_000), (1, 2048, 1024, 50_257)]
QUICK_SHAPES = [(2, 8, 16, 50)]


def tables(
    device: str, threads: int, rounds: int, compiled_too: bool, seed: int, quick: bool = False, block: float = 0.02
) -> list[str]:
    shapes = QUICK_SHAPES if quick else SHAPES
    return [one_shape(b, s, d, v, device, threads, rounds, compiled_too, seed, block) for b, s, d, v in shapes]


def one_shape(
    b: int,
    s: int,
    d: int,
    v: int,
    device: str,
    threads: int,
    rounds: int,
    compiled_too: bool,
    seed: int,
    block_seconds: float = 0.02,
) -> str:
    gen = torch.Generator().manual_seed(0)
    package = ce.TransformerEmbedding(v, d, dropout=0.0, max_len=s, device=device).eval()
    emb = nn.Embedding(v, d, device=device)
    with torch.no_grad():
        emb.weight.copy_(package.token.weight)
    pe = ce.sinusoidal_table(s, d, device=device)
    ids = torch.randint(0, v, (b, s), generator=gen).to(device)
    pe_rows = package.positions.encoding(s, 0, device=device)
    single = one_pass.OnePassEmbedding(v, d, max_len=s, device=device)
    with torch.no_grad():
        single.token.weight.copy_(package.token.weight)
    variants = {
        "textbook": lambda: emb(ids) * math.sqrt(d) + pe[:s],
        "textbook'": lambda: emb(ids) * math.sqrt(d) + pe[:s],
        "gather": lambda: F.embedding(ids, emb.weight),
        "package": lambda: package(ids),
        "two-pass": lambda: _lookup_add(ids, package.token.weight, pe_rows, math.sqrt(d), None),
        "one-pass": lambda: single(ids),
    }
    if compiled_too:
        compiled = ce.TransformerEmbedding(v, d, dropout=0.0, max_len=s, device=device, compile=True).eval()
        compiled.load_state_dict(package.state_dict())
        variants["compiled"] = lambda: compiled(ids)
        c_textbook = torch.compile(lambda: emb(ids) * math.sqrt(d) + pe[:s], dynamic=False)
        c_package = torch.compile(package, dynamic=False, fullgraph=True)
        variants["c-textbook"] = c_textbook
        variants["c-package"] = lambda: c_package(ids)
        compiled_gather = torch.compile(F.embedding, dynamic=False)
        variants["c-gather"] = lambda: compiled_gather(ids, emb.weight)
    with torch.inference_mode():
        expected = emb(ids) * math.sqrt(d) + pe[:s]
        if compiled_too:
            assert torch.equal(variants["c-gather"](), variants["gather"]())
        # also compiles, before any timing
        for name in ("package", "two-pass", "one-pass", "compiled", "c-textbook", "c-package"):
            if name in variants:
                torch.testing.assert_close(variants[name](), expected, rtol=1e-6, atol=1e-5)
        nbytes, gathered = bench.embedding_bytes(b, s, d, 4), bench.gather_bytes(b, s, d, 4)
        table = bench.compare(
            variants,
            nbytes,
            baseline="textbook",
            device=device,
            threads=threads,
            rounds=rounds,
            block_seconds=block_seconds,
            seed=seed,
            variant_bytes={"gather": gathered, "c-gather": gathered},
            title=f"embedding x sqrt(d) + sinusoidal, (b, s, d) = ({b}, {s}, {d}), V = {v}",
        )
        check = bench.compare(
            {"check_ids": lambda: check_ids(ids, v), "package": lambda: package(ids)},
            nbytes,
            baseline="package",
            device=device,
            threads=threads,
            rounds=rounds,
            block_seconds=block_seconds,
        )
    eager, gather = table.row("package").seconds, table.row("gather").seconds
    mid, low, high = table.ratio_ci("textbook", "package")
    noise = table.ratio_ci("textbook", "textbook'")
    one_mid, one_low, one_high = table.ratio_ci("two-pass", "one-pass")
    floor = table.noise_floor()
    if one_low > floor[1] or one_high < floor[0]:
        one_verdict = "clear of the floor, one-pass " + ("faster" if one_low > floor[1] else "slower")
    else:
        one_verdict = "reaches the floor, not resolved"
    extra = nbytes / gathered  # a one-pass layer's minimum bytes over the gather's
    bound = table.row("textbook").seconds / (extra * gather)
    lines = [
        table.format(),
        f"noise floor: textbook / textbook' = {noise[0]:.2f}x [{noise[1]:.2f}, {noise[2]:.2f}]",
        f"package eager: {mid:.2f}x textbook [{low:.2f}, {high:.2f}] (goal >= 1.7), "
        f"{eager / gather:.2f}x the bare gather's time (goal <= 1.5)",
        f"one-pass: two-pass / one-pass time {one_mid:.2f}x [{one_low:.2f}, {one_high:.2f}]: {one_verdict}",
        f"a one-pass layer moving its {extra:.3f}x the gather's bytes at the gather's rate: "
        f"{bound:.2f}x textbook, {extra:.2f}x the gather's time",
    ]
    if compiled_too:
        lines.append(
            f"compiled: {table.speedup('compiled'):.2f}x textbook, "
            f"{table.row('compiled').seconds / gather:.2f}x the bare gather's time (goal <= 1.2); "
            f"the compiled gather alone takes {table.row('c-gather').seconds / gather:.2f}x the eager gather's"
        )
        c_mid, c_low, c_high = table.ratio_ci("c-textbook", "c-package")
        lines.append(f"compiled model: c-package {c_mid:.2f}x c-textbook [{c_low:.2f}, {c_high:.2f}] (goal >= 1)")
    lines.append(
        f"id check: {check.row('check_ids').seconds / check.row('package').seconds:.1%} of the package's time\n"
    )
    return "\n".join(lines)


def main() -> None:
    args = parse(
        __doc__.splitlines()[0],
        extra=[
            ("--no-compile", {"action": "store_true", "help": "skip torch.compile (no C++ compiler)"}),
            ("--seed", {"type": int, "default": 0, "help": "seed of the rounds' shuffled orders"}),
        ],
    )
    print(machine())
    for device in args.device:
        for text in tables(
            device, args.threads, args.rounds, not args.no_compile, args.seed, args.quick, args.block_seconds
        ):
            print(text, flush=True)


if __name__ == "__main__":
    main()
