"""Hidden tests of exercise 01: the instructor's only (not in a release). Each test draws its inputs from the grading
run's secret `seed` and gathers the answers' outputs before its `yield` (in the sandbox); after it, in the grader,
it rebuilds the same inputs and compares with the reference."""

import torch

from course_embed.tools.grading.probe import as_tensor, between, choose, run, test


def _init_cases(seed):
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in (torch.float32, torch.float64, torch.float16):
        v, d = between(gen, 500, 3000), between(gen, 16, 256)
        cases.append((v, d, choose(gen, [None, between(gen, 0, v - 1)]), dtype))
    return cases


def _filled(out, label, dtype):
    """``(outputs, Parameter)`` of an init run on a ``dtype`` Parameter, once it kept the dtype and returned it."""
    result = out.ok(label)
    w = as_tensor(result["weight"], "the Parameter passed in")
    returned = as_tensor(result["returned"], f"{label} (its return value)")
    assert w.dtype == dtype, f"{label}: the table must keep its dtype {dtype}, got {w.dtype}"
    assert returned.shape == w.shape and torch.equal(returned, w), f"{label} must return the Parameter it filled"
    return result, w


def _only_the_pad_row_zero(w, pad, label):
    """The ``(v,)`` mask of ``w``'s zero rows, once exactly row ``pad`` (``None``: no row) is zero."""
    zero = (w == 0).all(dim=1)
    assert zero.tolist() == [i == pad for i in range(w.shape[0])], (
        f"{label}: exactly row padding_idx must be zero (None: no row), {int(zero.sum())} rows are"
    )
    return zero


def _init(init_embedding_, v, d, pad, dtype):
    w = torch.nn.Parameter(torch.full((v, d), 5.0, dtype=dtype))
    returned = init_embedding_(w, pad)
    return {"returned": returned, "weight": w}


@test("q1", points=2, hidden=True)
def init_matches_the_distribution(init_embedding_, *, seed):
    cases = _init_cases(seed)
    got = yield [run(_init, init_embedding_, *case) for case in cases]
    for (v, d, pad, dtype), out in zip(cases, got):
        label = f"init_embedding_ on a ({v}, {d}) {dtype} Parameter, padding_idx={pad}"
        result, w = _filled(out, label, dtype)
        rows = w.double()
        keep = rows[~_only_the_pad_row_zero(rows, pad, label)]
        std = d**-0.5
        assert abs(keep.std().item() - std) < 0.03 * std, (
            f"{label}: the rows' std is {keep.std().item():.4f}, expected d_model ** -0.5 = {std:.4f}"
        )
        assert abs(keep.mean().item()) < 5 * std / keep.numel() ** 0.5, f"{label}: the samples' mean is not 0"
        within = (keep.abs() < std).double().mean().item()  # 0.6827 for a normal, 0.577 for a uniform
        assert abs(within - 0.6827) < 0.02, (
            f"{label}: {within:.3f} of the samples lie within one std, a normal has 0.683 (uniform_ instead of "
            f"normal_?)"
        )


def _emb_cases(seed):
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in (torch.float32, torch.float64):
        v, d = between(gen, 2, 1200), between(gen, 1, 40)
        shape = tuple(between(gen, 1, 6) for _ in range(between(gen, 1, 3)))
        cases.append((v, d, choose(gen, [None, between(gen, 0, v - 1)]), shape, dtype, between(gen, 0, 2**31)))
    return cases


def _inputs(v, d, pad, shape, dtype, data_seed):
    gen = torch.Generator().manual_seed(data_seed)
    table = torch.randn(v, d, generator=gen, dtype=dtype)
    if pad is not None:
        table[pad] = 0
    ids = torch.randint(0, v, shape, generator=gen)
    if pad is not None:
        ids.view(-1)[0] = pad
    return table, ids, torch.randn(*shape, d, generator=gen, dtype=dtype)


def _embed(TokenEmbedding, v, d, pad, shape, dtype, data_seed):
    table, ids, upstream = _inputs(v, d, pad, shape, dtype, data_seed)
    emb = TokenEmbedding(v, d, padding_idx=pad).to(dtype)
    twin = TokenEmbedding(v, d, padding_idx=pad).to(dtype)
    with torch.no_grad():
        emb.weight.copy_(table)
        twin.weight.fill_(1.0)
    out64 = emb(ids)
    out64.backward(upstream)
    return {"weight": emb.weight, "out": out64, "out_int32": emb(ids.int()), "grad": emb.weight.grad}


@test("q2", points=1, hidden=True)
def token_embedding_matches_reference(TokenEmbedding, *, seed):
    cases = _emb_cases(seed)
    got = yield [run(_embed, TokenEmbedding, *case) for case in cases]
    import torch.nn.functional as F

    for case, out in zip(cases, got):
        v, d, pad, shape, dtype, _ = case
        table, ids, upstream = _inputs(*case)
        label = f"TokenEmbedding({v}, {d}, padding_idx={pad}).to({dtype}) on ids of shape {shape}"
        r = out.ok(label)
        assert torch.equal(as_tensor(r["weight"], f"{label}.weight"), table), (
            f"{label}: weight is not the Parameter the test loaded (a second module changed it? each module needs "
            f"its own table)"
        )
        expected = F.embedding(ids, table.double(), pad) * d**0.5
        for key in ("out", "out_int32"):
            got_out = as_tensor(r[key], label)
            assert got_out.shape == (*shape, d), f"{label} must return shape {(*shape, d)}, got {tuple(got_out.shape)}"
            assert got_out.dtype == dtype, f"{label} must return the table's dtype {dtype}, got {got_out.dtype}"
            assert torch.allclose(got_out.double(), expected, rtol=1e-6, atol=1e-6), (
                f"{label} ({key}) is not weight[ids] * sqrt({d})"
            )
        w64 = table.double().requires_grad_()
        (F.embedding(ids, w64, pad) * d**0.5).backward(upstream.double())
        assert r["grad"] is not None, f"{label}: no gradient reached weight"
        assert torch.allclose(as_tensor(r["grad"], "weight.grad").double(), w64.grad, rtol=1e-5, atol=1e-5), (
            f"{label}: the gradient of weight is wrong (does the pad row get one? pass padding_idx to F.embedding)"
        )


def _bad(TokenEmbedding, v, bad=None, pad=None):
    if bad is None:
        return TokenEmbedding(v, 4, padding_idx=pad)
    return TokenEmbedding(v, 4)(bad)


def _good(TokenEmbedding, v):
    emb = TokenEmbedding(v, 4)
    with torch.no_grad():
        emb.weight.copy_(torch.arange(4.0 * v).reshape(v, 4))
    return emb(torch.tensor([v - 1, 0]))


@test("q2", points=1, hidden=True)
def token_embedding_rejects_bad_input(TokenEmbedding, *, seed):
    gen = torch.Generator().manual_seed(seed)
    v = between(gen, 2, 500)
    cases = [
        (torch.tensor([[1.0, 2.0]]).to(choose(gen, [torch.float32, torch.float64, torch.float16])), TypeError),
        (torch.tensor([[0, -between(gen, 1, v)]]), ValueError),
        (torch.tensor([[v + between(gen, 0, 9)]]), ValueError),
        (torch.tensor([0, 1], dtype=choose(gen, [torch.int16, torch.uint8])), TypeError),
    ]
    pads = (v + between(gen, 0, 5), -between(gen, 1, 5))
    got = (
        yield [run(_good, TokenEmbedding, v)]
        + [run(_bad, TokenEmbedding, v, bad) for bad, _ in cases]
        + [run(_bad, TokenEmbedding, v, pad=pad) for pad in pads]
    )
    good = got[0].tensor(f"TokenEmbedding({v}, 4) on ids [{v - 1}, 0]", shape=(2, 4))
    assert torch.allclose(good, torch.arange(4.0 * v).reshape(v, 4)[[v - 1, 0]] * 2.0), (
        f"TokenEmbedding({v}, 4) on the ids [{v - 1}, 0] (both in range) is not weight[ids] * 2"
    )
    got = got[1:]
    for (bad, error), out in zip(cases, got):
        out.raises(f"TokenEmbedding({v}, 4) on {bad.dtype} ids {bad.tolist()}", error)
    for pad, out in zip(pads, got[len(cases) :]):
        out.raises(f"TokenEmbedding({v}, 4, padding_idx={pad})", ValueError)


@test("q3", points=1, hidden=True)
def mean_row_norm_for_other_seeds(mean_row_norm, *, seed):
    gen = torch.Generator().manual_seed(seed)
    seeds = (between(gen, 2, 10**6), between(gen, 2, 10**6))
    got = yield [run(mean_row_norm, s) for s in seeds]
    for s, out in zip(seeds, got):
        value = out.number(f"mean_row_norm({s})")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(s)
            weight = torch.nn.Embedding(1000, 512).weight.detach().double()
        expected = weight.norm(dim=1).mean().item()
        assert abs(value - expected) <= 0.0051, (
            f"mean_row_norm({s}) is {value:.4f}, expected {expected:.2f} to the 2 decimals asked: the seed set "
            f"inside the function, right before nn.Embedding(1000, 512)?"
        )


def _truncated_std(std, cutoff):
    """The standard deviation of N(0, std^2) restricted to [-cutoff std, cutoff std], and the share of its samples
    within one std of 0."""
    import math

    mass = math.erf(cutoff / math.sqrt(2))  # P(|z| < cutoff)
    density = math.exp(-(cutoff**2) / 2) / math.sqrt(2 * math.pi)  # phi(cutoff)
    return std * math.sqrt(1 - 2 * cutoff * density / mass), math.erf(1 / math.sqrt(2)) / mass


def _truncated_cases(seed):
    gen = torch.Generator().manual_seed(seed + 4)
    cases = []
    for dtype in (torch.float32, torch.float64):
        v, d = between(gen, 2000, 4000), between(gen, 64, 128)
        std, cutoff = choose(gen, [0.02, 0.1, 0.5]), choose(gen, [1.5, 2.0, 3.0])
        pad = between(gen, 0, v - 1) if dtype == torch.float32 else choose(gen, [None, between(gen, 0, v - 1)])
        cases.append((v, d, std, cutoff, pad, dtype))
    return cases


def _truncated_init(init_truncated_, v, d, std, cutoff, pad, dtype):
    backing = torch.full((v + 2, d), 5.0, dtype=dtype)  # the Parameter is its rows 1 to -2: filled in place, it changes
    w = torch.nn.Parameter(backing[1:-1])
    returned = init_truncated_(w, std, cutoff, pad)
    return {"returned": returned, "weight": w, "backing": backing}


@test("q4", points=0.5, hidden=True)
def truncated_init_fills_in_place_and_zeroes_the_pad_row(init_truncated_, *, seed):
    cases = _truncated_cases(seed)
    got = yield [run(_truncated_init, init_truncated_, *case) for case in cases]
    for (v, d, std, cutoff, pad, dtype), out in zip(cases, got):
        label = f"init_truncated_ on a ({v}, {d}) {dtype} Parameter, std={std}, cutoff={cutoff}, padding_idx={pad}"
        result, w = _filled(out, label, dtype)
        backing = as_tensor(result["backing"], "the tensor the Parameter is a view of")
        assert backing.shape == (v + 2, d) and torch.equal(backing[1:-1], w), (
            f"{label}: the values went into new storage, not the Parameter's own: fill it in place"
        )
        _only_the_pad_row_zero(w, pad, label)


@test("q4", points=1, hidden=True)
def truncated_init_matches_the_distribution(init_truncated_, *, seed):
    cases = [case[:4] + (None, case[5]) for case in _truncated_cases(seed)]  # no pad row: the values only
    got = yield [run(_truncated_init, init_truncated_, *case) for case in cases]
    for (v, d, std, cutoff, _, dtype), out in zip(cases, got):
        label = f"init_truncated_ on a ({v}, {d}) {dtype} Parameter, std={std}, cutoff={cutoff}"
        w = as_tensor(out.ok(label)["weight"], "the Parameter passed in").double()
        bound, (expected, within_expected) = cutoff * std, _truncated_std(std, cutoff)
        largest = w.abs().max().item()
        assert largest <= bound * (1 + 1e-6), f"{label}: values up to {largest:.4g} lie beyond +-cutoff * std"
        on_bounds = (w.abs() >= bound * (1 - 1e-6)).double().mean().item()
        assert on_bounds < 0.005, f"{label}: {on_bounds:.1%} of the values sit on the bounds (clamped, not re-drawn)"
        found = w.std().item()
        assert abs(found - expected) < 0.02 * expected, (
            f"{label}: the values' std is {found:.4g}, the truncated normal's is {expected:.4g}"
        )
        assert abs(w.mean().item()) < 5 * expected / w.numel() ** 0.5, f"{label}: the values' mean is not 0"
        within = (w.abs() < std).double().mean().item()
        assert abs(within - within_expected) < 0.02, (
            f"{label}: {within:.3f} of the values lie within one std of 0, the truncated normal has "
            f"{within_expected:.3f}"
        )


@test("q4", points=0.5, hidden=True)
def truncated_std_for_other_settings(truncated_std, *, seed):
    gen = torch.Generator().manual_seed(seed + 4)
    settings = [(0.02, 2.0), (choose(gen, [0.1, 0.5, 1.0]), choose(gen, [1.5, 3.0]))]
    seeds = [between(gen, 0, 2**31) for _ in settings]
    got = yield [run(truncated_std, std, cutoff, s) for (std, cutoff), s in zip(settings, seeds)]
    for (std, cutoff), s, out in zip(settings, seeds, got):
        label = f"truncated_std({std}, {cutoff}, {s})"
        value = out.number(label)
        expected = _truncated_std(std, cutoff)[0]
        assert abs(value - expected) <= 1e-3 * expected, (
            f"{label} is {value:.6g}, the truncated normal's standard deviation is {expected:.6g}"
        )
