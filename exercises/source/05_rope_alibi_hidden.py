"""Hidden tests of exercise 05: the instructor's only (not in a release). Each test draws its inputs from the grading
run's secret `seed` and gathers the answers' outputs before its `yield` (in the sandbox); after it, in the grader,
it rebuilds the same inputs and compares with course_embed's reference."""

import torch

from course_embed.tools.grading.probe import as_tensor, between, choose, run, test


def _rope_cases(seed):
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        shape = (between(gen, 1, 2), between(gen, 1, 4), between(gen, 1, 20), 2 * between(gen, 1, 32))
        cases.append((shape, choose(gen, [10000.0, 500000.0, 100.0]), dtype, between(gen, 0, 2**31)))
    return cases, (0, between(gen, 1, 64), between(gen, 1000, 9000))


def _x(shape, dtype, data_seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(data_seed), dtype=torch.float64).to(dtype)


def _rotate(rope, shape, base, dtype, data_seed, offsets):
    x = _x(shape, dtype, data_seed)
    return {"outs": [rope(x, offset, base) for offset in offsets], "x_after": x}


@test("q1", points=1, hidden=True)
def rope_matches_reference(rope, *, seed):
    cases, offsets = _rope_cases(seed)
    got = yield [run(_rotate, rope, *case, offsets) for case in cases]
    import course_embed as ce

    for (shape, base, dtype, data_seed), out in zip(cases, got):
        label = f"rope(x of shape {shape}, {dtype}, base={base})"
        r = out.ok(label)
        x = _x(shape, dtype, data_seed)
        assert torch.equal(as_tensor(r["x_after"], "x"), x), f"{label} changed x: write the result to a new tensor"
        tol = 3e-2 if dtype == torch.bfloat16 else 1e-9 if dtype == torch.float64 else 1e-5
        for offset, found in zip(offsets, r["outs"]):
            found = as_tensor(found, f"{label}, offset={offset}")
            assert found.dtype == dtype and tuple(found.shape) == shape, f"{label}: keep x's shape and dtype"
            expected = ce.RotaryEmbedding(shape[-1], base).rotate(x.double(), offset)
            error = (found.double() - expected).abs().max().item()
            assert error <= tol * max(1.0, expected.abs().max().item()), (
                f"{label}, offset={offset} is off by up to {error:.1e} (float64 angles? the base?)"
            )


@test("q1", points=1, hidden=True)
def rope_rejects_bad_shapes(rope, *, seed):
    cases, offsets = _rope_cases(seed)
    gen = torch.Generator().manual_seed(seed)
    bad = [(1, between(gen, 1, 3), 3, 2 * between(gen, 1, 8) + 1), (between(gen, 1, 3), 3, 8)]
    got = yield [run(_rotate, rope, *cases[0], offsets)] + [run(rope, torch.zeros(shape)) for shape in bad]
    import course_embed as ce

    shape, base, dtype, data_seed = cases[0]
    found = as_tensor(got[0].ok(f"rope(x of shape {shape})")["outs"][0], "rope(x)")
    expected = ce.RotaryEmbedding(shape[-1], base).rotate(_x(shape, dtype, data_seed).double(), 0)
    # only that a good x is rotated, not how well (rope_matches_reference grades that): the norm of each pair stays
    norms = found.double().reshape(*shape[:-1], -1, 2).norm(dim=-1) if tuple(found.shape) == shape else None
    assert norms is not None and torch.allclose(norms, expected.reshape(*shape[:-1], -1, 2).norm(dim=-1), atol=1e-2), (
        f"rope(x of shape {shape}) must return x's shape with each pair's length kept (a rotation), "
        f"got shape {tuple(found.shape)}"
    )
    for shape, out in zip(bad, got[1:]):
        out.raises(f"rope(x of shape {shape})", ValueError)


def _counts(seed):
    gen = torch.Generator().manual_seed(seed)
    return sorted({between(gen, 1, 40) for _ in range(12)} | {2 ** between(gen, 0, 7), between(gen, 41, 200)})


@test("q2", points=1, hidden=True)
def slopes_match_reference(alibi_slopes, *, seed):
    counts = _counts(seed)
    got = yield [run(alibi_slopes, n) for n in counts]
    import course_embed as ce

    for n, out in zip(counts, got):
        slopes = out.tensor(f"alibi_slopes({n})", shape=(n,))  # the dtype is graded by the public check
        assert slopes.is_floating_point(), f"alibi_slopes({n}) must return floating-point slopes, got {slopes.dtype}"
        slopes, expected = slopes.float(), ce.alibi_slopes(n)
        assert torch.allclose(slopes, expected, rtol=1e-6, atol=0), (
            f"alibi_slopes({n}) differs from Press et al.'s rule, e.g. slope {int((slopes - expected).abs().argmax())} "
            f"is {slopes[(slopes - expected).abs().argmax()].item():.6g}"
        )


@test("q2", points=1, hidden=True)
def slopes_reject_bad_counts(alibi_slopes, *, seed):
    gen = torch.Generator().manual_seed(seed)
    n, bad = between(gen, 1, 100), -between(gen, 0, 9)
    got = yield [run(alibi_slopes, n), run(alibi_slopes, bad)]
    import course_embed as ce

    slopes = got[0].tensor(f"alibi_slopes({n})", shape=(n,))  # the dtype is graded by the public check
    assert slopes.is_floating_point() and bool((slopes > 0).all()) and bool((slopes < 1).all()), (
        f"alibi_slopes({n}) must return {n} slopes in (0, 1), got {[round(v, 4) for v in slopes.tolist()[:4]]}..."
    )
    got[1].raises(f"alibi_slopes({bad})", ValueError)


def _recent_cases(seed):
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for _ in range(3):
        heads, seq = between(gen, 1, 16), between(gen, 2, 300)
        cases.append((between(gen, 0, heads - 1), heads, seq, between(gen, 1, seq)))
    return cases


@test("q3", points=1, hidden=True)
def recent_weight_for_several_heads(recent_weight, *, seed):
    cases = _recent_cases(seed)
    got = yield [run(recent_weight, *case) for case in cases]
    import course_embed as ce

    for (head, heads, seq, recent), out in zip(cases, got):
        label = f"recent_weight({head}, {heads}, {seq}, {recent})"
        value = out.number(label)
        bias = ce.alibi_bias(ce.alibi_slopes(heads, dtype=torch.float64), seq)  # (heads, 1, keys): the last query
        expected = torch.softmax(bias, dim=-1)[head, 0, -recent:].sum().item()
        assert abs(value - expected) <= 0.000051, (
            f"{label} is {value:.5f}, expected {expected:.4f} to the 4 decimals asked (and your alibi_slopes({heads}))"
        )


METHODS = ("linear", "ntk")
FORMULAS = {
    "linear": "theta_i / factor",
    "ntk": "base' ** (-2i / head_dim) with base' = base * factor ** (head_dim / (head_dim - 2))",
}


def _extend_cases(seed):
    gen = torch.Generator().manual_seed(seed)
    return [
        (2 * between(gen, 2, 128), choose(gen, [10000.0, 500000.0, 1e6]), choose(gen, [1.0, between(gen, 11, 640) / 10]))
        for _ in range(6)
    ]


@test("q4", points=1, hidden=True)
def extended_frequencies_match_reference(extended_frequencies, *, seed):
    cases = _extend_cases(seed)
    bad = choose(torch.Generator().manual_seed(seed), ["yarn", "quadratic", "dynamic", "Linear"])
    got = yield [run(extended_frequencies, *case, m) for case in cases for m in METHODS] + [
        run(extended_frequencies, 16, 10000.0, 2.0, bad)
    ]
    import course_embed as ce

    outs = iter(got)
    for d, base, factor in cases:
        for m in METHODS:
            label = f"extended_frequencies({d}, {base}, {factor}, {m!r})"
            freqs = next(outs).tensor(label, shape=(d // 2,), dtype=torch.float64)
            expected, _ = ce.rope_parameters(d, base, {"rope_type": m, "factor": factor})
            assert torch.allclose(freqs, expected, rtol=1e-10, atol=0), f"{label} differs from {FORMULAS[m]}"
    next(outs).raises(f"extended_frequencies(16, 10000.0, 2.0, {bad!r})", ValueError)


@test("q4", points=0.5, hidden=True)
def unchanged_pairs_match_reference(unchanged_pairs, *, seed):
    gen = torch.Generator().manual_seed(seed)
    cases = [(d, base, factor, choose(gen, METHODS), choose(gen, [0.01, 0.05, 0.1, 0.2, 0.3, 0.5]))
             for d, base, factor in _extend_cases(seed)]
    got = yield [run(unchanged_pairs, *case) for case in cases]
    import course_embed as ce

    for (d, base, factor, m, tolerance), out in zip(cases, got):
        label = f"unchanged_pairs({d}, {base}, {factor}, {m!r}, {tolerance})"
        found = out.ok(label)
        assert isinstance(found, list) and all(type(i) is int for i in found), (
            f"{label} must return a Python list of ints (tensor.tolist() makes one)"
        )
        change = (ce.rope_parameters(d, base, {"rope_type": m, "factor": factor})[0] / ce.rope_frequencies(d, base)
                  - 1).abs()
        inside = torch.nonzero(change < tolerance - 1e-6).flatten().tolist()
        either = torch.nonzero((change - tolerance).abs() <= 1e-6).flatten().tolist()  # rounding may go either way
        assert set(inside) <= set(found) <= set(inside) | set(either) and found == sorted(found), (
            f"{label} is not the pairs with |theta_i' / theta_i - 1| < tolerance, in increasing order"
        )


def _partial_cases(seed):
    gen = torch.Generator().manual_seed(seed + 5)
    cases = []
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        head_dim = 2 * between(gen, 2, 32)
        rotary_dim = head_dim if dtype == torch.float64 else 2 * between(gen, 1, head_dim // 2 - 1)
        shape = (between(gen, 1, 2), between(gen, 1, 4), between(gen, 1, 20), head_dim)
        cases.append((shape, rotary_dim, choose(gen, [10000.0, 500000.0, 100.0]), dtype, between(gen, 0, 2**31)))
    return cases, (0, between(gen, 1, 64), between(gen, 1000, 9000))


def _rotate_partial(rope_partial_half, shape, rotary_dim, base, dtype, data_seed, offsets):
    x = _x(shape, dtype, data_seed)
    return {"outs": [rope_partial_half(x, rotary_dim, offset, base) for offset in offsets], "x_after": x}


@test("q5", points=1, hidden=True)
def partial_rope_matches_reference(rope_partial_half, *, seed):
    cases, offsets = _partial_cases(seed)
    got = yield [run(_rotate_partial, rope_partial_half, *case, offsets) for case in cases]
    from course_embed.rotary import apply_rotary

    for (shape, rotary_dim, base, dtype, data_seed), out in zip(cases, got):
        label = f"rope_partial_half(x of shape {shape}, {rotary_dim}, {dtype}, base={base})"
        r = out.ok(label)
        x = _x(shape, dtype, data_seed)
        assert torch.equal(as_tensor(r["x_after"], "x"), x), f"{label} changed x: write the result to a new tensor"
        tol = 3e-2 if dtype == torch.bfloat16 else 1e-9 if dtype == torch.float64 else 1e-5
        theta = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
        for offset, found in zip(offsets, r["outs"]):
            found = as_tensor(found, f"{label}, offset={offset}")
            assert found.dtype == dtype and tuple(found.shape) == shape, f"{label}: keep x's shape and dtype"
            angles = torch.arange(offset, offset + shape[2], dtype=torch.float64)[:, None] * theta
            expected = apply_rotary(x.double(), angles.cos(), angles.sin(), "half")
            error = (found.double() - expected).abs()
            assert torch.equal(found[..., rotary_dim:], x[..., rotary_dim:]), (
                f"{label}, offset={offset}: dims from rotary_dim on must pass through unchanged"
            )
            worst = error.max().item()
            assert worst <= tol * max(1.0, expected.abs().max().item()), (
                f"{label}, offset={offset} is off from the rotate-half rotation of the first {rotary_dim} dims by up "
                f"to {worst:.1e}"
            )


@test("q5", points=0.5, hidden=True)
def partial_rope_rejects_bad_arguments(rope_partial_half, *, seed):
    gen = torch.Generator().manual_seed(seed + 5)
    head_dim = 2 * between(gen, 2, 32)
    bad = [((1, 2, 3, head_dim), 2 * between(gen, 1, head_dim // 2 - 1) + 1, "an odd rotary_dim"),
           ((1, 2, 3, head_dim), head_dim + 2 * between(gen, 1, 4), "rotary_dim above head_dim"),
           ((2, 3, head_dim), 2, "x not 4-D")]
    cases, _ = _partial_cases(seed)
    got = yield [run(_rotate_partial, rope_partial_half, *cases[0], (0,))] + [
        run(rope_partial_half, torch.zeros(shape), rotary_dim) for shape, rotary_dim, _ in bad
    ]
    shape, rotary_dim, _, dtype, data_seed = cases[0]
    label = f"rope_partial_half(x of shape {shape}, {rotary_dim})"
    found = as_tensor(got[0].ok(label)["outs"][0], label)
    x = _x(shape, dtype, data_seed)
    # only that a good x is rotated, not how well (partial_rope_matches_reference grades that): the dims from
    # rotary_dim on pass through, and the length of each pair (i, i + rotary_dim / 2) stays
    assert tuple(found.shape) == shape and torch.equal(found[..., rotary_dim:], x[..., rotary_dim:]), (
        f"{label} must return x's shape with the dims from rotary_dim on unchanged, got shape {tuple(found.shape)}"
    )
    half = rotary_dim // 2

    def norms(t):
        return torch.stack((t[..., :half].double(), t[..., half:rotary_dim].double()), dim=-1).norm(dim=-1)

    assert torch.allclose(norms(found), norms(x), atol=1e-4), f"{label} must keep the length of each pair"
    for (shape, rotary_dim, why), out in zip(bad, got[1:]):
        out.raises(f"rope_partial_half(x of shape {shape}, {rotary_dim}) ({why})", ValueError)
