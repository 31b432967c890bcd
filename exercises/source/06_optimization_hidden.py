"""Hidden tests of exercise 06: the instructor's only (not in a release). Each test gathers the answers' outputs
before its `yield` (in the sandbox) and compares them with course_embed's reference after it (in the grader)."""

import random

import torch

from course_embed.tools.grading.probe import Tensor, as_tensor, run, test

CASES = [(50, 16, 3, 7, 0, torch.float32), (9, 6, 1, 1, None, torch.float64), (300, 33, 2, 40, 299, torch.float32)]


def _lookup_cases(lookup_add):
    gen = torch.Generator().manual_seed(8)
    found = []
    for v, d, b, s, pad, dtype in CASES:
        ids = torch.randint(0, v, (b, s), generator=gen)
        ids[0, 0] = pad if pad is not None else 1
        w = torch.randn(v, d, generator=gen, dtype=dtype).requires_grad_()
        pe = torch.randn(s, d, generator=gen, dtype=dtype).requires_grad_()
        upstream = torch.randn(b, s, d, generator=gen, dtype=dtype)
        kept = (ids.clone(), w.detach().clone(), pe.detach().clone())
        out = lookup_add(ids, w, pe, d ** 0.5, pad)
        out_copy = out.detach().clone()
        out.backward(upstream)
        unchanged = all(torch.equal(a, b) for a, b in zip(kept, (ids, w.detach(), pe.detach())))
        found.append({"ids": kept[0], "w": kept[1], "pe": kept[2], "upstream": upstream, "out": out_copy,
                      "w_grad": w.grad, "pe_grad": pe.grad, "unchanged": unchanged})
    return found


@test("q1", points=1, hidden=True)
def lookup_add_matches_reference(lookup_add):
    got = yield run(_lookup_cases, lookup_add)
    from course_embed.fusion import lookup_add_reference
    for (v, d, b, s, pad, dtype), r in zip(CASES, got.ok("lookup_add")):
        label = f"lookup_add on ({b}, {s}) ids, a ({v}, {d}) {dtype} table, padding_idx={pad}"
        w = r["w"].data.clone().requires_grad_()
        pe = r["pe"].data.clone().requires_grad_()
        expected = lookup_add_reference(r["ids"].data, w, pe, d ** 0.5, pad)
        out = as_tensor(r["out"], label)
        assert out.dtype == dtype, f"{label}: the output must be {dtype}"
        torch.testing.assert_close(out, expected.detach(), rtol=1e-5, atol=1e-5, msg=lambda m: f"{label}: {m}")
        expected.backward(r["upstream"].data)
        torch.testing.assert_close(as_tensor(r["w_grad"], "weight.grad"), w.grad, rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"{label}: the gradient of weight: {m}")
        torch.testing.assert_close(as_tensor(r["pe_grad"], "pe.grad"), pe.grad, rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"{label}: the gradient of pe: {m}")


@test("q1", points=1, hidden=True)
def lookup_add_leaves_its_inputs_alone(lookup_add):
    got = yield run(_lookup_cases, lookup_add)
    for (v, d, b, s, pad, dtype), r in zip(CASES, got.ok("lookup_add")):
        assert r["unchanged"], "lookup_add must not modify ids, weight or pe (only the lookup's own output)"


def _sparse(sparse_embedding_grad, ids, grad_out, vocab, padding_idx=None):
    with torch.sparse.check_sparse_tensor_invariants():  # bad indices raise instead of corrupting memory
        kept = grad_out.clone()
        result = sparse_embedding_grad(ids, grad_out, vocab, padding_idx)
        return {"grad": result, "unchanged": torch.equal(kept, grad_out)}


SPARSE_CASES = [(1000, 8, 4, 50, 0, torch.float32), (7, 3, 2, 9, None, torch.float64),
                (30, 5, 3, 11, 29, torch.float32)]


def _sparse_inputs():
    gen = torch.Generator().manual_seed(9)
    for v, d, b, s, pad, dtype in SPARSE_CASES:
        ids = torch.randint(0, v, (b, s), generator=gen)
        ids[0, :2] = pad if pad is not None else 3
        yield ids, torch.randn(b, s, d, generator=gen, dtype=dtype), v, pad


@test("q2", points=1, hidden=True)
def sparse_grad_matches_reference(sparse_embedding_grad):
    got = yield [run(_sparse, sparse_embedding_grad, ids.to(id_dtype), grad_out, v, pad)
                 for ids, grad_out, v, pad in _sparse_inputs() for id_dtype in (torch.int64, torch.int32)]
    import torch.nn.functional as F
    outs = iter(got)
    for ids, grad_out, v, pad in _sparse_inputs():
        w = torch.zeros(v, grad_out.shape[-1], dtype=grad_out.dtype, requires_grad=True)
        F.embedding(ids, w, pad, sparse=True).backward(grad_out)
        expected = w.grad.coalesce()
        for id_dtype in ("int64", "int32"):
            label = f"sparse_embedding_grad({id_dtype} ids, vocab_size={v}, padding_idx={pad})"
            r = next(outs).ok(label)
            assert r["unchanged"], f"{label} must not modify grad_out"
            value = r["grad"]
            assert isinstance(value, Tensor) and value.sparse, f"{label}: return a sparse COO tensor"
            assert value.coalesced and tuple(value.data.shape) == (v, grad_out.shape[-1]), \
                f"{label}: a coalesced ({v}, {grad_out.shape[-1]}) tensor"
            assert value.data.dtype == grad_out.dtype, f"{label}: in grad_out's dtype"
            assert torch.equal(value.data._indices(), expected.indices()), \
                f"{label}: store exactly the rows the ids touch, without the pad row"
            torch.testing.assert_close(value.data._values(), expected.values(), rtol=1e-6, atol=1e-6)


@test("q2", points=1, hidden=True)
def sparse_grad_rejects_bad_ids(sparse_embedding_grad):
    grad_out = torch.ones(1, 2, 3)
    cases = [(torch.tensor([[1.0, 2.0]]), TypeError), (torch.tensor([[1, -1]]), ValueError),
             (torch.tensor([[1, 10]]), ValueError)]
    got = yield [run(_sparse, sparse_embedding_grad, bad, grad_out, 10) for bad, _ in cases]
    for (bad, error), out in zip(cases, got):
        out.raises(f"sparse_embedding_grad(ids={bad.tolist()}, vocab_size=10)", error)


@test("q3", points=1, hidden=True)
def sparse_fraction_for_several_seeds(sparse_fraction):
    seeds = (0, 4)
    got = yield [run(sparse_fraction, s) for s in seeds]
    import torch.nn.functional as F

    from course_embed.lab.bench import tensor_bytes
    for seed, out in zip(seeds, got):
        value = out.number(f"sparse_fraction({seed})")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            ids = torch.randint(0, 32000, (8, 256))
        weight = torch.zeros(32000, 512, requires_grad=True)
        F.embedding(ids, weight, sparse=True).sum().backward()
        expected = tensor_bytes(weight.grad.coalesce()) / tensor_bytes(weight.detach())
        assert abs(value - expected) <= 0.000051, f"sparse_fraction({seed}) is off by more than the 4 decimals asked"


def _shapes(seed, count):
    """``count`` seeded ``(batch, seq, d_model, itemsize)``, batch 1 included."""
    gen = random.Random(seed)
    return [(gen.choice((1, 2, 3, 8, 32)), gen.randint(1, 2048), gen.choice((8, 64, 96, 512, 768, 1024, 4096)),
             gen.choice((1, 2, 4, 8))) for _ in range(count)]


BYTES_CASES = [(1, 1, 1, 4), (1, 4096, 1024, 4), (8, 512, 768, 2), (5, 7, 3, 8), *_shapes(61, 12)]


@test("q4", points=0.5, hidden=True)
def min_bytes_match_the_closed_form(min_bytes):
    got = yield [run(min_bytes, *case) for case in BYTES_CASES]
    for (b, s, d, itemsize), out in zip(BYTES_CASES, got, strict=True):
        label = f"min_bytes({b}, {s}, {d}, {itemsize})"
        value = out.number(label, int)
        rows, output, positions = b * s * d, b * s * d, s * d  # elements read, written, read once
        assert value == itemsize * (rows + output + positions), \
            f"{label} is {value}: count itemsize bytes per element of the rows read, the output written and the " \
            f"position rows (read once, not once per sequence)"


def _staircase(gen, steps):
    """A seeded sweep: sizes 2**k bytes, k increasing from 10 to 34, each with a bandwidth in [2, 400) GB/s."""
    exponents = sorted(gen.sample(range(10, 35), steps))
    return [(2**k, round(gen.uniform(2.0, 400.0), 3)) for k in exponents]


def _memory_cases():
    gen = random.Random(62)
    cases = [(shape, _staircase(gen, gen.randint(2, 9)), 1e6) for shape in _shapes(63, 24)]
    # working sets exactly at a swept size (4,456,448 and 26,738,688 bytes), one byte past one, and off the ends
    cases += [((8, 128, 512, 4), [(2**20, 50.0), (4_456_448, 20.0), (2**24, 10.0)], 1e6),
              ((8, 128, 512, 4), [(2**20, 50.0), (4_456_449, 20.0), (2**24, 10.0)], 1e6),
              ((8, 512, 768, 4), [(2**16, 19.8), (26_738_688, 13.4), (2**28, 9.1)], 1e6),
              ((8, 512, 768, 4), [(2**16, 19.8), (2**20, 52.3), (2**22, 58.6), (2**24, 13.4), (2**26, 7.4)], 1e6),
              ((1, 16, 64, 4), [(2**16, 19.8), (2**18, 38.2), (2**24, 13.4)], 1e6),
              ((32, 2048, 4096, 4), [(2**16, 19.8), (2**22, 58.6), (2**28, 9.1)], 1e6),
              ((2, 100, 64, 2), [(2**20, 30.0)], 1e6)]
    return cases


MEMORY_CASES = _memory_cases()


def _pair(out, label):
    """``(seconds, roof)`` from a ``time_bound`` outcome, with the types the question asks for."""
    value = out.ok(label)
    assert isinstance(value, (tuple, list)) and len(value) == 2, f"{label} must return a tuple (seconds, roof)"
    assert isinstance(value[0], float), f"{label}: seconds must be a Python float"
    return value


@test("q4", points=1, hidden=True)
def time_bound_reads_the_right_step(time_bound):
    got = yield [run(time_bound, *shape, staircase, peak) for shape, staircase, peak in MEMORY_CASES]
    for ((b, s, d, itemsize), staircase, peak), out in zip(MEMORY_CASES, got, strict=True):
        label = f"time_bound{(b, s, d, itemsize, staircase, peak)}"
        seconds, roof = _pair(out, label)
        nbytes = itemsize * (2 * b * s * d + s * d)
        reached = [step for step in staircase if step[0] <= nbytes]
        size, gbps = reached[-1] if reached else staircase[0]
        expected = nbytes / (gbps * 1e9)
        assert roof == "memory", f"{label}: at {peak} GFLOP/s the memory roof binds, got roof {roof!r}"
        assert abs(seconds / expected - 1) <= 1e-9, \
            f"{label} is {seconds!r} s, expected {expected!r} s: {nbytes} bytes at the {size}-byte step, " \
            f"{gbps} GB/s (1 GB = 1e9 bytes)"


STAIRS = [(2**16, 19.8), (2**18, 38.2), (2**20, 52.3), (2**22, 58.6), (2**24, 13.4), (2**26, 7.4), (2**28, 9.1)]
# (8, 512, 768) in float32: 6,291,456 FLOPs over 26,738,688 bytes at the 16 MiB step's 13.4 GB/s, so the roofs
# cross at 3.15 GFLOP/s: 3.0 is just compute-bound, 3.7 just memory-bound
COMPUTE_CASES = [((8, 512, 768, 4), STAIRS, 0.001), ((8, 512, 768, 4), STAIRS, 3.0),
                 ((8, 512, 768, 4), STAIRS, 3.7), ((1, 4096, 1024, 2), STAIRS, 1.0),
                 *[(shape, STAIRS, 0.01) for shape in _shapes(64, 6)]]


@test("q4", points=0.5, hidden=True)
def time_bound_has_a_compute_roof(time_bound):
    got = yield [run(time_bound, *shape, staircase, peak) for shape, staircase, peak in COMPUTE_CASES]
    for ((b, s, d, itemsize), staircase, peak), out in zip(COMPUTE_CASES, got, strict=True):
        label = f"time_bound({b}, {s}, {d}, {itemsize}, staircase, {peak}) on section 6.2's staircase"
        seconds, roof = _pair(out, label)
        nbytes = itemsize * (2 * b * s * d + s * d)
        reached = [g for size, g in staircase if size <= nbytes]
        gbps = reached[-1] if reached else staircase[0][1]
        memory, compute = nbytes / (gbps * 1e9), 2 * b * s * d / (peak * 1e9)
        assert roof == ("compute" if compute > memory else "memory"), \
            f"{label}: {2 * b * s * d} FLOPs at {peak} GFLOP/s take {compute:.3g} s against {memory:.3g} s for the " \
            f"bytes: got roof {roof!r}"
        assert abs(seconds / max(memory, compute) - 1) <= 1e-9, \
            f"{label} is {seconds!r} s, expected {max(memory, compute)!r} s: the larger of the two roofs' times"
