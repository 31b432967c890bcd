"""Training-time costs of a large vocabulary: the whole step, the loss, sparse gradients, a bfloat16 table, and
vocabulary parallelism.

    python benchmarks/training.py [--device cpu] [--threads 1] [--rounds 11] [--quick]

1. One training step of profile_step.TinyGPT (V = 32000, d = 128, 2 layers, ids (8, 128)), tied and untied, broken
   down by torch.profiler into input layer / blocks / head + loss (forward and backward) / optimizer (table, rest).
2. Cross-entropy forward + backward, (n, d) = (1024, 128), V = 32000: full logits against the chunked loss, time
   and peak memory (glibc bytes in use after every operator).
3. The input layer, forward + backward (dense gradient), (32, 128, 512), V = 10000: textbook against the package.
4. Sparse gradients, V = 200k, d = 256, ids (32, 128), forward + backward + step, with fair dense baselines:
   Adam(foreach=True) and Adam(fused=True), glibc keeping freed memory (no page faults for any variant).
5. bfloat16 storage of the table (forward), with its accuracy cost.
6. VocabParallelEmbedding and the vocabulary-parallel cross-entropy in 2 processes (gloo): exactness report and
   forward + backward times against one process; and lab.sharding's FSDP-style row-sharded lookup against the
   vocabulary-parallel one, with the bytes each rank's ring collectives sent against the ring formulas.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import course_embed as ce
from course_embed import parallel
from course_embed.lab import bench, optimization, profile_step, sharding

from common import machine, parse

#: --quick: tiny sizes and 1 ms blocks, set by main() (and passed to the 2-process workers)
QUICK = {"on": False}


def sizes(full: tuple, tiny: tuple) -> tuple:
    """The script's sizes, or tiny ones under --quick."""
    return tiny if QUICK["on"] else full


def block() -> float:
    return 0.001 if QUICK["on"] else 0.02


def step_profile() -> str:
    v, d, b, s = sizes((32_000, 128, 8, 128), (100, 16, 2, 8))
    gen = torch.Generator().manual_seed(0)
    ids, targets = torch.randint(0, v, (b, s), generator=gen), torch.randint(0, v, (b, s), generator=gen)
    lines = [f"one training step of TinyGPT, V = {v}, d = {d}, 2 layers, ids ({b}, {s}) [torch.profiler, CPU time]"]
    for tied in (True, False):
        torch.manual_seed(0)
        model = profile_step.TinyGPT(v, d, layers=2, heads=4, max_len=s, tied=tied)
        phases = profile_step.profile_step(model, ids, targets, warmup=2)
        total = sum(phases.values())
        lines.append(
            f"{'tied' if tied else 'untied'}: {total:.0f} ms; "
            + ", ".join(f"{name} {ms / total:.1%}" for name, ms in phases.items())
        )
    return "\n".join(lines) + "\n"


def loss_table(threads: int, rounds: int) -> str:
    n, d, v = sizes((1024, 128, 32_000), (16, 8, 300))
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(n, d, generator=gen, requires_grad=True)
    w = (torch.randn(v, d, generator=gen) * d**-0.5).requires_grad_()
    t = torch.randint(0, v, (n,), generator=gen)
    variants = {
        "full logits": lambda: F.cross_entropy(h @ w.T, t).backward(),
        "chunked 256": lambda: profile_step.chunked_cross_entropy(h, w, t, 256).backward(),
    }
    peaks = {}
    for name, fn in variants.items():
        with profile_step.PeakMemory() as meter:
            fn()
        peaks[name] = meter.peak
    table = bench.compare(
        variants,
        None,
        baseline="full logits",
        threads=threads,
        rounds=rounds,
        block_seconds=block(),
        title=f"cross-entropy fwd + bwd, (n, d) = ({n}, {d}), V = {v}",
    )
    return (
        "\n".join(
            [table.format()]
            + [f"{name}: peak {peaks[name] / 2**20:.1f} MiB (logits {n * v * 4 / 2**20:.1f} MiB)" for name in variants]
        )
        + "\n"
    )


def layer_backward_table(threads: int, rounds: int) -> str:
    b, s, d, v = sizes((32, 128, 512, 10_000), (2, 8, 16, 50))
    gen = torch.Generator().manual_seed(0)
    model = ce.TransformerEmbedding(v, d, dropout=0.0, max_len=s)
    emb = nn.Embedding(v, d)
    with torch.no_grad():
        emb.weight.copy_(model.token.weight)
    pe, ids = ce.sinusoidal_table(s, d), torch.randint(0, v, (b, s), generator=gen)
    upstream = torch.randn(b, s, d, generator=gen)

    def textbook():
        emb.weight.grad = None
        ((emb(ids) * math.sqrt(d) + pe) * upstream).sum().backward()

    def package():
        model.token.weight.grad = None
        (model(ids) * upstream).sum().backward()

    table = bench.compare(
        {"textbook": textbook, "package": package},
        2 * bench.embedding_bytes(b, s, d, 4),
        baseline="textbook",
        threads=threads,
        rounds=rounds,
        block_seconds=block(),
        title=f"input layer fwd + bwd (dense gradient), ({b}, {s}, {d}), V = {v}",
    )
    return table.format() + "\n"


def sparse_table(device: str, threads: int, rounds: int) -> str:
    v, d, b, s = sizes((200_000, 256, 32, 128), (100, 16, 2, 8))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, v, (b, s), generator=gen).to(device)
    target = torch.randn(b, s, d, generator=gen).to(device)
    setups, memory = {}, []
    for name, sparse, make in [
        ("dense+Adam(foreach)", False, lambda p: torch.optim.Adam(p, lr=1e-3, foreach=True)),
        ("dense+Adam(fused)", False, lambda p: torch.optim.Adam(p, lr=1e-3, fused=True)),
        ("sparse+SparseAdam", True, lambda p: torch.optim.SparseAdam(p, lr=1e-3)),
        ("sparse+Adagrad", True, lambda p: torch.optim.Adagrad(p, lr=0.1)),
        ("dense+SGD", False, lambda p: torch.optim.SGD(p, lr=0.1)),
        ("sparse+SGD", True, lambda p: torch.optim.SGD(p, lr=0.1)),
    ]:
        model = ce.TransformerEmbedding(v, d, dropout=0.0, max_len=s, sparse=sparse, device=device)
        optimizer = make([model.token.weight])

        def step(model=model, optimizer=optimizer):
            optimizer.zero_grad(set_to_none=True)
            F.mse_loss(model(ids), target).backward()
            optimizer.step()

        step()
        grad = bench.tensor_bytes(model.token.weight.grad)
        state = sum(
            bench.tensor_bytes(t)
            for st in optimizer.state.values()
            for t in st.values()
            if isinstance(t, torch.Tensor) and t.dim() > 0
        )
        memory.append(f"{name:<20} gradient {grad / 2**20:7.1f} MiB   optimizer state {state / 2**20:7.1f} MiB")
        setups[name] = step
    table = bench.compare(
        setups,
        None,
        baseline="dense+Adam(fused)",
        device=device,
        threads=threads,
        rounds=rounds,
        block_seconds=block(),
        title=f"fwd + bwd + step, V = {v}, d = {d}, ids ({b}, {s}); table {v * d * 4 / 2**20:.0f} MiB",
    )
    return "\n".join([table.format(), *memory, ""])


def bf16_table(device: str, threads: int, rounds: int) -> str:
    b, s, d, v = sizes((32, 128, 512, 10_000), (2, 8, 16, 50))
    gen = torch.Generator().manual_seed(0)
    fp32 = ce.TransformerEmbedding(v, d, dropout=0.0, max_len=s, device=device).eval()
    bf16 = ce.TransformerEmbedding(v, d, dropout=0.0, max_len=s, device=device, dtype=torch.bfloat16).eval()
    bf16.load_state_dict(fp32.state_dict())
    ids = torch.randint(0, v, (b, s), generator=gen).to(device)
    with torch.inference_mode():
        table = bench.compare(
            {"float32": lambda: fp32(ids), "bfloat16": lambda: bf16(ids)},
            bench.embedding_bytes(b, s, d, 4),
            baseline="float32",
            device=device,
            threads=threads,
            rounds=rounds,
            block_seconds=block(),
            title=f"table storage, (b, s, d) = ({b}, {s}, {d}), V = {v} (GB/s counts float32 bytes)",
        )
        err = optimization.relative_error(bf16(ids), fp32(ids))
    storage = optimization.relative_error(fp32.token.weight.to(torch.bfloat16), fp32.token.weight)
    lost = optimization.lost_update_fraction(fp32.token.weight.detach(), 1e-4, torch.bfloat16)
    return "\n".join(
        [
            table.format(),
            f"table rounded to bfloat16: relative error max {storage['max']:.2e}, rms {storage['rms']:.2e}",
            f"output (scaled rows + positions): relative error max {err['max']:.2e}, rms {err['rms']:.2e}",
            f"an update of +1e-4 to every weight (an Adam step at lr 1e-4): {lost:.1%} of the bfloat16 weights "
            f"do not change",
            "",
        ]
    )


def _parallel_worker(rank: int, world_size: int, port: int, threads: int, rounds: int, results, quick=False) -> None:
    QUICK["on"] = quick
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        report = parallel.check_against_unsharded(batch=4, seq=32, vocab_size=1001, d_model=16, padding_idx=900, seed=3)
        rows = sharding.check_row_sharding(vocab_size=1002, d_model=16, batch=2, seq=24, seed=1)
        b, s, d, v = sizes((8, 512, 768, 32_000), (2, 8, 16, 50))
        gen = torch.Generator().manual_seed(0)
        full = torch.randn(v, d, generator=gen)
        ids = torch.randint(0, v, (b, s), generator=gen)
        sharded = ce.VocabParallelEmbedding(v, d).load_full_(full)
        single = nn.Embedding(v, d)
        with torch.no_grad():
            single.weight.copy_(full)

        def fwd_bwd(module):
            module.weight.grad = None
            module(ids).sum().backward()

        with torch.no_grad():
            fwd = bench.compare(
                {"one process": lambda: single(ids), "2 ranks": lambda: sharded(ids)},
                bench.embedding_bytes(b, s, d, 4),
                baseline="one process",
                threads=threads,
                rounds=rounds,
                calls=3 if quick else 20,  # the same on both ranks: the sharded variant's collectives must pair up
                title=f"embedding forward, ({b}, {s}, {d}), V = {v}, rank {rank}",
            )
        both = bench.compare(
            {"one process": lambda: fwd_bwd(single), "2 ranks": lambda: fwd_bwd(sharded)},
            2 * bench.embedding_bytes(b, s, d, 4),
            baseline="one process",
            threads=threads,
            rounds=rounds,
            calls=3 if quick else 20,  # the same on both ranks: the sharded variant's collectives must pair up
            title=f"embedding forward + backward, rank {rank}",
        )
        if rank == 0:
            results.put((report, rows, fwd.format(), both.format()))
    finally:
        dist.destroy_process_group()


def parallel_tables(threads: int, rounds: int) -> str:
    import torch.multiprocessing as mp

    results = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(
        _parallel_worker,
        args=(2, parallel.free_port(), threads, rounds, results, QUICK["on"]),
        nprocs=2,
        start_method="spawn",
    )
    report, rows, fwd, both = results.get()
    return "\n".join(
        [
            f"2 processes, gloo: {report}",
            f"FSDP-style row sharding and vocabulary parallelism, rank 0 (bytes sent vs ring formulas): {rows}",
            fwd,
            both,
            "(both ranks time at once, on the same cores, each timing includes its all-reduce)",
            "",
        ]
    )


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    QUICK["on"] = args.quick
    print(machine())
    print("glibc keeps freed memory:", bench.keep_freed_memory())
    print(step_profile(), flush=True)
    print(loss_table(args.threads, args.rounds), flush=True)
    print(layer_backward_table(args.threads, args.rounds), flush=True)
    for device in args.device:
        print(sparse_table(device, args.threads, args.rounds), flush=True)
        print(bf16_table(device, args.threads, args.rounds), flush=True)
    print(parallel_tables(args.threads, args.rounds), flush=True)


if __name__ == "__main__":
    main()
