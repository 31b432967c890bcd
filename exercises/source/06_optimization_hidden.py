"""Hidden tests of exercise 06: the instructor's only (not in a release). Each test draws its inputs from the grading
run's secret `seed` and gathers the answers' outputs before its `yield` (in the sandbox); after it, in the grader,
it rebuilds the same inputs and compares with course_embed's reference."""

import random

import torch

from course_embed.tools.grading.probe import Tensor, as_tensor, between, choose, run, test

def _lookup_cases(seed):
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in (torch.float32, torch.float64, torch.float32):
        v, d, b, s = between(gen, 2, 400), between(gen, 1, 40), between(gen, 1, 3), between(gen, 1, 50)
        cases.append((v, d, b, s, choose(gen, [None, between(gen, 0, v - 1)]), dtype, between(gen, 0, 2**31)))
    return cases


def _lookup_inputs(v, d, b, s, pad, dtype, data_seed):
    gen = torch.Generator().manual_seed(data_seed)
    ids = torch.randint(0, v, (b, s), generator=gen)
    ids[0, 0] = pad if pad is not None else 0
    return (ids, torch.randn(v, d, generator=gen, dtype=dtype), torch.randn(s, d, generator=gen, dtype=dtype),
            torch.randn(b, s, d, generator=gen, dtype=dtype))


def _lookup(lookup_add, case):
    ids, weight, pe, upstream = _lookup_inputs(*case)
    w, p = weight.clone().requires_grad_(), pe.clone().requires_grad_()
    out = lookup_add(ids, w, p, case[1] ** 0.5, case[4])
    values = out.detach().clone()
    out.backward(upstream)
    return {"out": values, "w_grad": w.grad, "pe_grad": p.grad, "after": [ids, w.detach(), p.detach()]}


def _expected(case):
    from course_embed.fusion import lookup_add_reference

    ids, weight, pe, upstream = _lookup_inputs(*case)
    w, p = weight.double().requires_grad_(), pe.double().requires_grad_()
    out = lookup_add_reference(ids, w, p, case[1] ** 0.5, case[4])
    out.backward(upstream.double())
    return out.detach(), w.grad, p.grad


@test("q1", points=1, hidden=True)
def lookup_add_matches_reference(lookup_add, *, seed):
    cases = _lookup_cases(seed)
    got = yield [run(_lookup, lookup_add, case) for case in cases]
    for case, out in zip(cases, got):
        v, d, b, s, pad, dtype, _ = case
        label = f"lookup_add on ({b}, {s}) ids, a ({v}, {d}) {dtype} table, padding_idx={pad}"
        r = out.ok(label)
        expected, w_grad, pe_grad = _expected(case)
        found = as_tensor(r["out"], label)
        assert found.dtype == dtype and found.shape == expected.shape, f"{label}: a {tuple(expected.shape)} {dtype} output"
        error = (found.double() - expected).abs().max().item()
        assert torch.allclose(found.double(), expected, rtol=1e-5, atol=1e-5), (
            f"{label}: the values differ from weight[ids] * sqrt(d) + pe by up to {error:.1e}"
        )
        for key, want, name in (("w_grad", w_grad, "weight"), ("pe_grad", pe_grad, "pe")):
            assert r[key] is not None, f"{label}: no gradient reached {name}"
            grad = as_tensor(r[key], f"{name}.grad").double()
            assert grad.shape == want.shape, f"{label}: {name}.grad must have {name}'s shape {tuple(want.shape)}"
            if name == "weight" and pad is not None:
                assert torch.all(grad[pad] == 0), f"{label}: row {pad} (padding_idx) received a gradient"
            error = (grad - want).abs().max().item()
            assert torch.allclose(grad, want, rtol=1e-5, atol=1e-5), (
                f"{label}: the gradient of {name} differs from the sum of its positions' upstream gradients"
                + (" times sqrt(d)" if name == "weight" else " over the batch")
                + f" by up to {error:.1e}"
            )


@test("q1", points=1, hidden=True)
def lookup_add_leaves_its_inputs_alone(lookup_add, *, seed):
    cases = _lookup_cases(seed)
    got = yield [run(_lookup, lookup_add, case) for case in cases]
    for case, out in zip(cases, got):
        label = f"lookup_add on ({case[2]}, {case[3]}) ids, a ({case[0]}, {case[1]}) table"
        r = out.ok(label)
        found, expected = as_tensor(r["out"], label).double(), _expected(case)[0]
        error = (found - expected).abs().max().item() if found.shape == expected.shape else float("inf")
        assert error <= 1e-5 * (1 + expected.abs().max().item()), (
            f"{label}: the output differs from weight[ids] * sqrt(d) + pe by up to {error:.1e} (this test credits "
            f"leaving the inputs alone to an answer that computes the layer)"
        )
        ids, weight, pe, _ = _lookup_inputs(*case)
        after = [as_tensor(t, "an input") for t in r["after"]]
        for name, before, now in zip(("ids", "weight", "pe"), (ids, weight, pe), after):
            assert now.shape == before.shape and torch.equal(now, before), (
                f"{label} changed {name}: only the lookup's own output may change in place"
            )


def _sparse(sparse_embedding_grad, ids, grad_out, vocab, padding_idx=None):
    with torch.sparse.check_sparse_tensor_invariants():  # bad indices raise instead of corrupting memory
        result = sparse_embedding_grad(ids, grad_out, vocab, padding_idx)
        return {"grad": result, "grad_out_after": grad_out}


def _sparse_inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    for dtype in (torch.float32, torch.float64, torch.float32):
        v, d, b, s = between(gen, 2, 2000), between(gen, 1, 9), between(gen, 1, 4), between(gen, 1, 60)
        pad = choose(gen, [None, between(gen, 0, v - 1)])
        ids = torch.randint(0, v, (b, s), generator=gen)
        ids[0, :1] = pad if pad is not None else 0
        yield ids, torch.randn(b, s, d, generator=gen, dtype=dtype), v, pad


@test("q2", points=1, hidden=True)
def sparse_grad_matches_reference(sparse_embedding_grad, *, seed):
    got = yield [
        run(_sparse, sparse_embedding_grad, ids.to(id_dtype), grad_out.clone(), v, pad)
        for ids, grad_out, v, pad in _sparse_inputs(seed)
        for id_dtype in (torch.int64, torch.int32)
    ]
    import torch.nn.functional as F

    outs = iter(got)
    for ids, grad_out, v, pad in _sparse_inputs(seed):
        w = torch.zeros(v, grad_out.shape[-1], dtype=grad_out.dtype, requires_grad=True)
        F.embedding(ids, w, pad, sparse=True).backward(grad_out)
        expected = w.grad.coalesce()
        for id_dtype in ("int64", "int32"):
            label = f"sparse_embedding_grad({id_dtype} ids of shape {tuple(ids.shape)}, vocab_size={v}, padding_idx={pad})"
            r = next(outs).ok(label)
            assert torch.equal(as_tensor(r["grad_out_after"], "grad_out"), grad_out), f"{label} changed grad_out"
            value = r["grad"]
            assert isinstance(value, Tensor) and value.sparse, f"{label}: return a sparse COO tensor"
            t = value.data
            assert tuple(t.shape) == (v, grad_out.shape[-1]) and t.sparse_dim() == 1, (
                f"{label}: a ({v}, {grad_out.shape[-1]}) tensor with one index per row"
            )
            assert t.dtype == grad_out.dtype, f"{label}: in grad_out's dtype {grad_out.dtype}"
            assert torch.equal(t._indices(), expected.indices()), (
                f"{label}: store exactly the rows the ids touch, once each and in order, without the pad row"
            )
            assert torch.allclose(t._values(), expected.values(), rtol=1e-6, atol=1e-6), f"{label}: wrong row sums"


@test("q2", points=1, hidden=True)
def sparse_grad_rejects_bad_ids(sparse_embedding_grad, *, seed):
    gen = torch.Generator().manual_seed(seed)
    v = between(gen, 2, 100)
    grad_out = torch.ones(1, 2, 3)
    cases = [(torch.tensor([[1.0, 0.0]]), TypeError), (torch.tensor([[1, -between(gen, 1, 9)]]), ValueError),
             (torch.tensor([[0, v + between(gen, 0, 9)]]), ValueError)]
    got = yield [run(_sparse, sparse_embedding_grad, torch.tensor([[v - 1, v - 1]]), grad_out, v)] + [
        run(_sparse, sparse_embedding_grad, bad, grad_out, v) for bad, _ in cases
    ]
    # only that good ids pass and bad ones raise: the layout and the values are sparse_grad_matches_reference's
    label = f"sparse_embedding_grad(ids [[{v - 1}, {v - 1}]], ones (1, 2, 3), {v})"
    value = got[0].ok(label)["grad"]
    assert isinstance(value, Tensor), f"{label}: the largest id, {v - 1}, is in range: return its gradient"
    for (bad, error), out in zip(cases, got[1:]):
        out.raises(f"sparse_embedding_grad(ids={bad.tolist()}, vocab_size={v})", error)


@test("q3", points=1, hidden=True)
def sparse_fraction_for_other_seeds(sparse_fraction, *, seed):
    gen = torch.Generator().manual_seed(seed)
    seeds = (between(gen, 2, 10**6), between(gen, 2, 10**6))
    got = yield [run(sparse_fraction, s) for s in seeds]
    import torch.nn.functional as F

    from course_embed.lab.bench import tensor_bytes

    for s, out in zip(seeds, got):
        value = out.number(f"sparse_fraction({s})")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(s)
            ids = torch.randint(0, 32000, (8, 256))
        weight = torch.zeros(32000, 512, requires_grad=True)
        F.embedding(ids, weight, sparse=True).sum().backward()
        expected = tensor_bytes(weight.grad.coalesce()) / tensor_bytes(weight.detach())
        assert abs(value - expected) <= 0.000051, (
            f"sparse_fraction({s}) is {value:.5f}, expected {expected:.4f} to the 4 decimals asked (the seed set "
            f"inside the function, before torch.randint?)"
        )


def _shapes(seed, count):
    """``count`` seeded ``(batch, seq, d_model, itemsize)``, batch 1 included."""
    gen = random.Random(seed)
    return [(gen.choice((1, 2, 3, 8, 32)), gen.randint(1, 2048), gen.choice((8, 64, 96, 512, 768, 1024, 4096)),
             gen.choice((1, 2, 4, 8))) for _ in range(count)]


@test("q4", points=0.5, hidden=True)
def min_bytes_match_the_closed_form(min_bytes, *, seed):
    cases = [(1, 1, 1, 4), (1, 4096, 1024, 4), (8, 512, 768, 2), (5, 7, 3, 8), *_shapes(seed, 12)]
    got = yield [run(min_bytes, *case) for case in cases]
    for (b, s, d, itemsize), out in zip(cases, got, strict=True):
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


def _memory_cases(seed):
    gen = random.Random(seed)
    cases = [(shape, _staircase(gen, gen.randint(2, 9)), 1e6) for shape in _shapes(seed + 1, 24)]
    # working sets exactly at a swept size (4,456,448 and 26,738,688 bytes), one byte past one, and off the ends
    cases += [((8, 128, 512, 4), [(2**20, 50.0), (4_456_448, 20.0), (2**24, 10.0)], 1e6),
              ((8, 128, 512, 4), [(2**20, 50.0), (4_456_449, 20.0), (2**24, 10.0)], 1e6),
              ((8, 512, 768, 4), [(2**16, 19.8), (26_738_688, 13.4), (2**28, 9.1)], 1e6),
              ((8, 512, 768, 4), [(2**16, 19.8), (2**20, 52.3), (2**22, 58.6), (2**24, 13.4), (2**26, 7.4)], 1e6),
              ((1, 16, 64, 4), [(2**16, 19.8), (2**18, 38.2), (2**24, 13.4)], 1e6),
              ((32, 2048, 4096, 4), [(2**16, 19.8), (2**22, 58.6), (2**28, 9.1)], 1e6),
              ((2, 100, 64, 2), [(2**20, 30.0)], 1e6)]
    return cases


def _pair(out, label):
    """``(seconds, roof)`` from a ``time_bound`` outcome, with the types the question asks for."""
    value = out.ok(label)
    assert isinstance(value, (tuple, list)) and len(value) == 2, f"{label} must return a tuple (seconds, roof)"
    assert isinstance(value[0], float), f"{label}: seconds must be a Python float"
    return value


@test("q4", points=0.5, hidden=True)
def time_bound_reads_the_right_step(time_bound, *, seed):
    cases = _memory_cases(seed)
    got = yield [run(time_bound, *shape, staircase, peak) for shape, staircase, peak in cases]
    for ((b, s, d, itemsize), staircase, peak), out in zip(cases, got, strict=True):
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
FIXED_COMPUTE = [((8, 512, 768, 4), STAIRS, 0.001), ((8, 512, 768, 4), STAIRS, 3.0),
                 ((8, 512, 768, 4), STAIRS, 3.7), ((1, 4096, 1024, 2), STAIRS, 1.0)]


@test("q4", points=0.5, hidden=True)
def time_bound_has_a_compute_roof(time_bound, *, seed):
    cases = FIXED_COMPUTE + [(shape, STAIRS, 0.01) for shape in _shapes(seed + 2, 6)]
    got = yield [run(time_bound, *shape, staircase, peak) for shape, staircase, peak in cases]
    for ((b, s, d, itemsize), staircase, peak), out in zip(cases, got, strict=True):
        label = f"time_bound({b}, {s}, {d}, {itemsize}, staircase, {peak}) on chapter 6's staircase"
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


def _expected_step_bytes(v, d, distinct, optimizer, sparse, tied, itemsize):
    table = v * d * itemsize
    dense = tied or not sparse
    grad = table if dense else distinct * (d * itemsize + 8)
    return grad + {"sgd": 0, "adagrad": 1, "adam": 2, "sparseadam": 2}[optimizer] * table


#: the setups the optimizers accept: (optimizer, sparse, tied)
_VALID_SETUPS = [("sgd", False, False), ("sgd", True, False), ("sgd", True, True), ("adagrad", False, False),
                 ("adagrad", True, False), ("adagrad", True, True), ("adam", False, False), ("adam", False, True),
                 ("adam", True, True), ("sparseadam", True, False)]


def _step_cases(seed):
    gen = torch.Generator().manual_seed(seed + 6)
    cases = []
    for optimizer, sparse, tied in _VALID_SETUPS:
        v, d = between(gen, 100, 200_000), between(gen, 8, 1024)
        cases.append((v, d, between(gen, 1, min(v, 5000)), optimizer, sparse, tied, choose(gen, [2, 4, 8])))
    return cases


@test("q5", points=1, hidden=True)
def table_step_bytes_match_the_closed_form(table_step_bytes, *, seed):
    cases = _step_cases(seed)
    got = yield [
        run(table_step_bytes, v, d, n, opt, sparse=sparse, tied=tied, itemsize=size)
        for v, d, n, opt, sparse, tied, size in cases
    ]
    for case, out in zip(cases, got):
        v, d, n, opt, sparse, tied, size = case
        label = f"table_step_bytes({v}, {d}, {n}, {opt!r}, sparse={sparse}, tied={tied}, itemsize={size})"
        value = out.number(label, int)
        expected = _expected_step_bytes(*case)
        assert value == expected, (
            f"{label} is {value}, expected {expected} (the gradient, dense unless sparse and untied, plus the "
            f"optimizer's dense state), off by {value - expected:+d} bytes"
        )


@test("q5", points=0.5, hidden=True)
def table_step_bytes_rejects_bad_setups(table_step_bytes, *, seed):
    gen = torch.Generator().manual_seed(seed + 6)
    v, d, n = between(gen, 100, 200_000), between(gen, 8, 1024), between(gen, 1, 99)
    bad = [("adam", True, False), ("sparseadam", False, False), ("sparseadam", True, True),
           (choose(gen, ["momentum", "Adam", "rmsprop"]), False, False)]
    got = yield [run(table_step_bytes, v, d, n, "sgd", sparse=True)] + [
        run(table_step_bytes, v, d, n, opt, sparse=sparse, tied=tied) for opt, sparse, tied in bad
    ]
    label = f"table_step_bytes({v}, {d}, {n}, 'sgd', sparse=True)"
    value = got[0].number(label, int)
    # only that a valid setup returns its bytes (table_step_bytes_match_the_closed_form grades the others)
    assert value == n * (d * 4 + 8), f"{label} is {value}, expected {n * (d * 4 + 8)}: a valid setup returns its bytes"
    for (opt, sparse, tied), out in zip(bad, got[1:]):
        out.raises(f"table_step_bytes({v}, {d}, {n}, {opt!r}, sparse={sparse}, tied={tied})", ValueError)


def _kept_inputs(seed, dtype):
    """Weights stored in ``dtype`` (every exponent from the subnormals to 2^8, both signs, some zeros) and float32
    updates: most a random fraction of the weight around half its spacing, some exact ties (half a spacing away from
    zero or towards it), some just above a tie (by less than the weight's format resolves), some absolute (for zero
    and subnormal weights)."""
    gen = torch.Generator().manual_seed(seed)
    shape = (between(gen, 2, 6), between(gen, 40, 90))
    low = -30 if dtype == torch.float16 else -60
    exponents = torch.randint(low, 9, shape, generator=gen).double()
    signs = torch.randint(0, 2, shape, generator=gen).double() * 2 - 1
    weight = (signs * (1 + torch.rand(shape, generator=gen, dtype=torch.float64)) * 2**exponents).to(dtype)
    weight[torch.rand(shape, generator=gen) < 0.05] = 0
    bits = weight.view(torch.int16)
    away = (bits + 1).view(dtype).float() - weight.float()  # one spacing away from zero
    toward = weight.float() - (bits - 1).view(dtype).float()  # one spacing towards zero (the sign's direction)
    digits = 8 if dtype == torch.bfloat16 else 11
    relative = 2 ** (torch.rand(shape, generator=gen) * 10 - digits - 5)  # around half a spacing, relative
    flips = torch.randint(0, 2, shape, generator=gen).float() * 2 - 1
    update = weight.float() * relative * flips
    kind = torch.randint(0, 8, shape, generator=gen)
    update = torch.where(kind == 0, away / 2, update)  # a tie away from zero
    update = torch.where((kind == 1) & (weight != 0), -toward / 2, update)  # a tie towards zero
    tiny = 2 ** (torch.rand(shape, generator=gen) * 6 - (27 if dtype == torch.float16 else 40))
    update = torch.where((kind == 2) | (weight == 0), tiny * flips, update)  # absolute
    # just above a tie, by less than the format's own precision resolves but within float32's
    low, high = (10, 15) if digits == 8 else (11, 12)
    above = 2.0 ** -torch.randint(low, high + 1, shape, generator=gen).float()
    update = torch.where((kind == 3) & (weight != 0), away / 2 * (1 + above), update)
    return weight, update.float()


def _kept_reference(weight, update):
    return (weight.float() + update).to(weight.dtype) != weight


def _kept_test(kept_updates, seed, dtype):
    weight, update = _kept_inputs(seed, dtype)
    got = yield run(kept_updates, weight.clone(), update.clone())
    label = f"kept_updates({dtype} weights {tuple(weight.shape)}, float32 updates)"
    mask = got.tensor(label, weight.shape, torch.bool)
    expected = _kept_reference(weight, update)
    wrong = (mask != expected).nonzero()
    at = tuple(wrong[0]) if len(wrong) else None
    assert not len(wrong), (
        f"{label}: {len(wrong)} of {weight.numel()} entries wrong, e.g. the update {update[at].item():.6g} of the "
        f"weight {weight[at].item():.6g} is {'kept' if expected[at] else 'lost'} when the float32 sum is rounded to "
        f"{dtype}"
    )


@test("q6", points=0.5, hidden=True)
def kept_updates_in_bfloat16(kept_updates, *, seed):
    yield from _kept_test(kept_updates, seed, torch.bfloat16)


@test("q6", points=0.5, hidden=True)
def kept_updates_in_float16(kept_updates, *, seed):
    yield from _kept_test(kept_updates, seed + 1, torch.float16)


def _kept_after(kept_updates, weight, update):
    mask = kept_updates(weight, update)
    return {"mask": mask, "weight": weight, "update": update}


@test("q6", points=0.25, hidden=True)
def kept_updates_leave_their_inputs_unchanged(kept_updates, *, seed):
    weight, update = _kept_inputs(seed + 2, torch.bfloat16)
    got = yield run(_kept_after, kept_updates, weight.clone(), update.clone())
    label = f"kept_updates(bfloat16 weights {tuple(weight.shape)}, float32 updates)"
    r = got.ok(label)
    # only that an answer computing the mask leaves its inputs alone (the other q6 tests grade the mask)
    assert torch.equal(as_tensor(r["mask"], label), _kept_reference(weight, update)), (
        f"{label} is not the mask of kept updates (this test credits unchanged inputs to an answer that computes it)"
    )
    assert torch.equal(as_tensor(r["weight"], "the weight after the call"), weight) and torch.equal(
        as_tensor(r["update"], "the update after the call"), update
    ), "kept_updates changed its weight or its update: leave both unchanged"


@test("q6", points=0.25, hidden=True)
def kept_updates_rejects_other_formats_and_shapes(kept_updates, *, seed):
    weight, update = _kept_inputs(seed + 3, torch.bfloat16)
    other = choose(torch.Generator().manual_seed(seed + 4), [torch.float32, torch.float64])
    rows, cols = weight.shape
    got = yield [
        run(kept_updates, weight, update),
        run(kept_updates, weight.to(other), update),
        run(kept_updates, weight, update[:, :-1]),
    ]
    label = f"kept_updates({weight.dtype} weights {tuple(weight.shape)}, float32 updates)"
    mask = got[0].tensor(label, weight.shape, torch.bool)
    # only that valid input returns its mask (the other q6 tests grade the values)
    assert torch.equal(mask, _kept_reference(weight, update)), (
        f"{label} is not the mask of kept updates (this test credits the errors to an answer that computes it)"
    )
    dtype_name = str(other).removeprefix("torch.")
    message = got[1].raises(f"kept_updates({other} weights, ...)", TypeError)
    assert dtype_name in message, (
        f"the TypeError of kept_updates({other} weights, ...) must name their dtype, {other}: got {message!r}"
    )
    message = got[2].raises(f"kept_updates(weights ({rows}, {cols}), updates ({rows}, {cols - 1}))", ValueError)
    assert f"{rows}, {cols}" in message and f"{rows}, {cols - 1}" in message, (
        f"the ValueError of kept_updates(weights ({rows}, {cols}), updates ({rows}, {cols - 1})) must name both "
        f"shapes: got {message!r}"
    )
