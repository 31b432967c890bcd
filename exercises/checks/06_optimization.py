"""Public tests of exercise 06 (what `grader.check` runs). Format: course_embed/tools/grading/probe.py."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from course_embed.tools.grading.probe import Tensor, as_tensor, run, test


class NewTensors(TorchDispatchMode):
    """Records every op that returns a fresh (not in-place, not a view) tensor of ``numel`` elements."""

    def __init__(self, numel):
        super().__init__()
        self.numel, self.ops = numel, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        fresh = not func._schema.is_mutable and not any(r.alias_info for r in func._schema.returns)
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if fresh and isinstance(t, torch.Tensor) and t.numel() == self.numel:
                self.ops.append(str(func))
        return out


def _small(lookup_add):
    gen = torch.Generator().manual_seed(0)
    ids = torch.tensor([[1, 3, 0], [2, 2, 4]])
    weight = torch.randn(5, 4, generator=gen, requires_grad=True)
    pe = torch.randn(3, 4, generator=gen, requires_grad=True)
    upstream = torch.randn(2, 3, 4, generator=gen)
    out = lookup_add(ids, weight, pe, 2.0, padding_idx=0)
    out.backward(upstream)
    return {"ids": ids, "weight": weight, "pe": pe, "upstream": upstream, "out": out, "grad": weight.grad}


@test("q1", points=1)
def lookup_add_values_and_pad_row_gradient(lookup_add):
    got = yield run(_small, lookup_add)
    r = got.ok("lookup_add(ids, weight, pe, 2.0, padding_idx=0)")
    ids, weight, pe = r["ids"].data, r["weight"].data, r["pe"].data
    out = as_tensor(r["out"], "lookup_add(...)")
    assert tuple(out.shape) == (2, 3, 4), f"expected a (2, 3, 4) tensor, got {tuple(out.shape)}"
    assert torch.allclose(out, weight[ids] * 2.0 + pe, atol=1e-6), "values must equal W[ids] * scale + pe"
    grad = as_tensor(r["grad"], "weight.grad")
    assert torch.all(grad[0] == 0), "row padding_idx must receive no gradient"
    assert grad[2].abs().sum() > 0, "the rows looked up must receive a gradient"


def _count(lookup_add):
    ids = torch.randint(0, 100, (4, 32), generator=torch.Generator().manual_seed(1))
    weight = torch.randn(100, 64, requires_grad=True)
    pe = torch.randn(32, 64, requires_grad=True)
    with NewTensors(4 * 32 * 64) as mode:
        out = lookup_add(ids, weight, pe, 8.0)
    return {"shape": list(out.shape), "ops": mode.ops}


@test("q1", points=1)
def lookup_add_allocates_one_output(lookup_add):
    got = yield run(_count, lookup_add)
    r = got.ok("lookup_add on (4, 32) ids")
    assert r["shape"] == [4, 32, 64], f"expected shape (4, 32, 64), got {tuple(r['shape'])}"
    assert len(r["ops"]) == 1, f"{len(r['ops'])} new (batch, seq, d) tensors ({', '.join(r['ops'])}); expected 1: " \
                               f"look up, then scale and add in place"


def _sparse(sparse_embedding_grad, ids, grad_out, vocab, padding_idx=None):
    with torch.sparse.check_sparse_tensor_invariants():  # bad indices raise instead of corrupting memory
        return sparse_embedding_grad(ids, grad_out, vocab, padding_idx)


@test("q2", points=1)
def sparse_grad_sums_repeated_rows_and_checks_ids(sparse_embedding_grad):
    ids = torch.tensor([[1, 3, 1]])
    grad_out = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]])
    got = yield [run(_sparse, sparse_embedding_grad, ids, grad_out, 5),
                 run(_sparse, sparse_embedding_grad, ids.float(), grad_out, 5),
                 run(_sparse, sparse_embedding_grad, torch.tensor([[1, 5, 0]]), grad_out, 5)]
    value = got[0].ok("sparse_embedding_grad(ids, grad_out, 5)")
    assert isinstance(value, Tensor) and value.sparse, "return a sparse COO tensor"
    assert value.coalesced, "coalesce it: one entry per row"
    expected = torch.tensor([[0.0, 0.0], [6.0, 8.0], [0.0, 0.0], [3.0, 4.0], [0.0, 0.0]])
    assert torch.equal(value.data.to_dense(), expected), "row 1 is looked up twice: it gets the sum of both gradients"
    assert value.data._nnz() == 2, "store only the 2 rows that were looked up"
    got[1].raises("sparse_embedding_grad(float ids, ...)", TypeError)
    got[2].raises("sparse_embedding_grad(ids with 5 >= vocab_size, ...)", ValueError)


def sparse_fraction_reference(seed):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        ids = torch.randint(0, 32000, (8, 256))
    rows = ids.unique().numel()
    return (rows * 8 + rows * 512 * 4) / (32000 * 512 * 4)


@test("q3", points=1)
def sparse_fraction_for_seed_1(sparse_fraction):
    got = yield run(sparse_fraction, 1)
    value = got.number("sparse_fraction(1)")
    assert abs(value - sparse_fraction_reference(1)) <= 0.000051, \
        "sparse_fraction(1) is off (checked to the 4 decimals asked): which bytes, which rows?"


def _bound(out, label):
    """``(seconds, roof)`` from a ``time_bound`` outcome, with the types the question asks for."""
    value = out.ok(label)
    assert isinstance(value, (tuple, list)) and len(value) == 2, f"{label} must return a tuple (seconds, roof)"
    seconds, roof = value
    assert isinstance(seconds, float), f"{label}: seconds must be a Python float (use float(...) or .item())"
    assert roof in ("memory", "compute"), f"{label}: roof must be the string 'memory' or 'compute', got {roof!r}"
    return seconds, roof


@test("q4", points=0.5)
def min_bytes_of_check_yourself_question_1(min_bytes):
    got = yield run(min_bytes, 8, 512, 768, 4)
    value = got.number("min_bytes(8, 512, 768, 4)", int)
    assert value == 26_738_688, \
        f"min_bytes(8, 512, 768, 4) is {value}, expected 4 * (2 * 8 * 512 * 768 + 512 * 768): which tensors are " \
        f"read, which written, and how often?"


TWO_STEPS = [(2**20, 50.0), (2**24, 10.0)]  # (bytes read + written, GB/s): a cache, then DRAM


@test("q4", points=0.5)
def time_bound_between_two_steps(time_bound):
    got = yield run(time_bound, 8, 128, 512, 4, TWO_STEPS, 100.0)
    label = f"time_bound(8, 128, 512, 4, {TWO_STEPS}, 100.0)"
    seconds, roof = _bound(got, label)
    assert roof == "memory", f"{label}: 0.25 FLOP/byte against a roof of 100 GFLOP/s is memory-bound"
    # 4 * (2 * 8 * 128 * 512 + 128 * 512) = 4,456,448 bytes (4.25 MiB) lie between the 1 MiB and 16 MiB steps
    assert abs(seconds / (4_456_448 / 50e9) - 1) < 1e-9, \
        f"{label} is {seconds!r} s, expected 4,456,448 bytes at 50 GB/s: the working set (4.25 MiB) has reached " \
        f"the 1 MiB step but not the 16 MiB one (and 1 GB/s is 1e9 bytes per second)"
