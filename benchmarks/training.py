"""Training-time choices for a large vocabulary: sparse gradients, and a bfloat16 table.

    python benchmarks/training.py [--device cpu] [--threads 2] [--rounds 11]

Sparse gradients, V = 200k, d = 256, ids (32, 128), one step = forward + backward + optimizer step:
  dense+SGD, sparse+SGD, dense+Adam, sparse+SparseAdam   (TransformerEmbedding(..., sparse=...))
  with the bytes of the gradient and of the optimizer state, which are what sparse=True is about.

bfloat16 storage of the table, the first input-layer shape (32, 128, 512), V = 10k, forward:
  float32 vs bfloat16 with the package's fused path, and the accuracy cost measured against float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import course_embed as ce
from course_embed.lab import bench, optimization

from common import machine, parse


def sparse_table(device: str, threads: int, rounds: int) -> str:
    v, d, b, s = 200_000, 256, 32, 128
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, v, (b, s), generator=gen).to(device)
    target = torch.randn(b, s, d, generator=gen).to(device)
    setups, memory = {}, []
    for name, sparse, make in [("dense+SGD", False, lambda p: torch.optim.SGD(p, lr=0.1)),
                               ("sparse+SGD", True, lambda p: torch.optim.SGD(p, lr=0.1)),
                               ("dense+Adam", False, lambda p: torch.optim.Adam(p, lr=1e-3)),
                               ("sparse+SparseAdam", True, lambda p: torch.optim.SparseAdam(p, lr=1e-3))]:
        model = ce.TransformerEmbedding(v, d, dropout=0.0, max_len=s, sparse=sparse, device=device)
        optimizer = make([model.token.weight])

        def step(model=model, optimizer=optimizer):
            optimizer.zero_grad(set_to_none=True)
            F.mse_loss(model(ids), target).backward()
            optimizer.step()

        step()
        grad = bench.tensor_bytes(model.token.weight.grad)
        state = sum(bench.tensor_bytes(t) for st in optimizer.state.values() for t in st.values()
                    if isinstance(t, torch.Tensor))
        memory.append(f"{name:<18} gradient {grad / 2**20:7.1f} MiB   optimizer state {state / 2**20:7.1f} MiB")
        setups[name] = step
    table_bytes = v * d * 4
    nbytes = bench.embedding_bytes(b, s, d, 4) * 2  # forward and backward of the lookup, at the least
    table = bench.compare(setups, nbytes, baseline="dense+Adam", device=device, threads=threads, rounds=rounds,
                          title=f"fwd + bwd + step, V = {v}, d = {d}, ids ({b}, {s}); table {table_bytes / 2**20:.0f} MiB")
    return "\n".join([table.format(), *memory, ""])


def bf16_table(device: str, threads: int, rounds: int) -> str:
    b, s, d, v = 32, 128, 512, 10_000
    gen = torch.Generator().manual_seed(0)
    fp32 = ce.TransformerEmbedding(v, d, dropout=0.0, max_len=s, device=device).eval()
    bf16 = ce.TransformerEmbedding(v, d, dropout=0.0, max_len=s, device=device, dtype=torch.bfloat16).eval()
    bf16.load_state_dict(fp32.state_dict())
    ids = torch.randint(0, v, (b, s), generator=gen).to(device)
    with torch.no_grad():
        table = bench.compare({"float32": lambda: fp32(ids), "bfloat16": lambda: bf16(ids)},
                              bench.embedding_bytes(b, s, d, 4), baseline="float32", device=device, threads=threads,
                              rounds=rounds, title=f"table storage, (b, s, d) = ({b}, {s}, {d}), V = {v} "
                                                   f"(GB/s counts float32 bytes)")
        err = optimization.relative_error(bf16(ids), fp32(ids))
    storage = optimization.relative_error(fp32.token.weight.to(torch.bfloat16), fp32.token.weight)
    lost = optimization.lost_update_fraction(fp32.token.weight.detach(), 1e-4, torch.bfloat16)
    return "\n".join([
        table.format(),
        f"table rounded to bfloat16: relative error max {storage['max']:.2e}, rms {storage['rms']:.2e}",
        f"output (scaled rows + positions): relative error max {err['max']:.2e}, rms {err['rms']:.2e}",
        f"an update of +1e-4 to every weight (an Adam step at lr 1e-4): {lost:.1%} of the bfloat16 weights do not change", ""])


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    print(machine())
    for device in args.device:
        print(sparse_table(device, args.threads, args.rounds), flush=True)
        print(bf16_table(device, args.threads, args.rounds), flush=True)


if __name__ == "__main__":
    main()
