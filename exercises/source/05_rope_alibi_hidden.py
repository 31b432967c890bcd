"""Hidden tests of exercise 05: the instructor's only (not in a release). Each test gathers the answers' outputs
before its `yield` (in the sandbox) and compares them with course_embed's reference after it (in the grader)."""

import torch

from course_embed.tools.grading.probe import as_tensor, run, test

ROPE_CASES = [((2, 3, 9, 8), 10000.0, torch.float32), ((1, 1, 1, 2), 10000.0, torch.float64),
              ((2, 4, 17, 64), 500000.0, torch.float64), ((1, 2, 6, 16), 10000.0, torch.bfloat16)]
OFFSETS = (0, 5, 3000)


def _rope_cases(rope):
    gen = torch.Generator().manual_seed(7)
    found = []
    for shape, base, dtype in ROPE_CASES:
        x = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
        kept = x.clone()
        outs = [rope(x, offset, base) for offset in OFFSETS]
        found.append({"x": kept, "outs": outs, "unchanged": torch.equal(x, kept)})
    return found


@test("q1", points=1, hidden=True)
def rope_matches_reference(rope):
    got = yield run(_rope_cases, rope)
    import course_embed as ce
    for (shape, base, dtype), case in zip(ROPE_CASES, got.ok("rope")):
        assert case["unchanged"], "rope must not modify x in place"
        x = case["x"].data
        tol = 3e-2 if dtype == torch.bfloat16 else 1e-5
        for offset, out in zip(OFFSETS, case["outs"]):
            label = f"rope(x of {shape} {dtype}, offset={offset}, base={base})"
            out = as_tensor(out, label)
            assert out.dtype == dtype and tuple(out.shape) == shape, f"{label}: same shape and dtype as x"
            torch.testing.assert_close(out, ce.RotaryEmbedding(shape[-1], base).rotate(x, offset), rtol=tol,
                                       atol=tol, msg=lambda m: f"{label} differs from the rotation: {m}")


@test("q1", points=1, hidden=True)
def rope_rejects_bad_shapes(rope):
    bad = [torch.zeros(1, 2, 3, 5), torch.zeros(2, 3, 8)]
    got = yield [run(rope, x) for x in bad]
    for x, out in zip(bad, got):
        out.raises(f"rope(x of shape {tuple(x.shape)})", ValueError)


COUNTS = list(range(1, 34)) + [48, 64, 80]


@test("q2", points=1, hidden=True)
def slopes_match_reference(alibi_slopes):
    got = yield [run(alibi_slopes, n) for n in COUNTS]
    import course_embed as ce
    for n, out in zip(COUNTS, got):
        slopes = out.tensor(f"alibi_slopes({n})", shape=(n,), dtype=torch.float32)
        torch.testing.assert_close(slopes, ce.alibi_slopes(n), rtol=1e-6, atol=0,
                                   msg=lambda m: f"alibi_slopes({n}) differs from Press et al.'s rule: {m}")


@test("q2", points=1, hidden=True)
def slopes_reject_bad_counts(alibi_slopes):
    got = yield [run(alibi_slopes, n) for n in (0, -4)]
    for n, out in zip((0, -4), got):
        out.raises(f"alibi_slopes({n})", ValueError)


RECENT_CASES = [(3, 8, 128, 16), (5, 12, 64, 8), (0, 1, 200, 50)]


@test("q3", points=1, hidden=True)
def recent_weight_for_several_heads(recent_weight):
    got = yield [run(recent_weight, *case) for case in RECENT_CASES]
    import course_embed as ce
    for (head, heads, seq, recent), out in zip(RECENT_CASES, got):
        value = out.number(f"recent_weight({head}, {heads}, {seq}, {recent})")
        bias = ce.alibi_bias(ce.alibi_slopes(heads, dtype=torch.float64), seq)  # (heads, 1, keys): the last query
        expected = torch.softmax(bias, dim=-1)[head, 0, -recent:].sum().item()
        assert abs(value - expected) <= 0.000051, \
            f"recent_weight({head}, {heads}, {seq}, {recent}) is off by more than the 4 decimals asked"


METHODS = ("linear", "ntk")
EXTEND_GRID = [(d, base, factor) for d in (4, 6, 16, 64, 128) for base in (10000.0, 500000.0)
               for factor in (1.0, 2.5, 8.0, 32.0)]
FORMULAS = {"linear": "theta_i / factor",
            "ntk": "base' ** (-2i / head_dim) with base' = base * factor ** (head_dim / (head_dim - 2))"}


@test("q4", points=1, hidden=True)
def extended_frequencies_match_reference(extended_frequencies):
    got = yield [run(extended_frequencies, *case, m) for case in EXTEND_GRID for m in METHODS] + \
        [run(extended_frequencies, 16, 10000.0, 2.0, bad) for bad in ("yarn", "quadratic")]
    import course_embed as ce
    outs = iter(got)
    for d, base, factor in EXTEND_GRID:
        for m in METHODS:
            label = f"extended_frequencies({d}, {base}, {factor}, {m!r})"
            freqs = next(outs).tensor(label, shape=(d // 2,), dtype=torch.float64)
            expected, _ = ce.rope_parameters(d, base, {"rope_type": m, "factor": factor})
            torch.testing.assert_close(freqs, expected, rtol=1e-10, atol=0,
                                       msg=lambda msg: f"{label} differs from {FORMULAS[m]}: {msg}")
    for bad in ("yarn", "quadratic"):
        next(outs).raises(f"extended_frequencies(16, 10000.0, 2.0, {bad!r})", ValueError)


# (head_dim, base, factor, method, tolerance); no pair's |theta_i' / theta_i - 1| lies within 1e-3 of its tolerance
UNCHANGED_CASES = [(128, 10000.0, 8.0, "ntk", 0.1), (64, 500000.0, 2.0, "ntk", 0.05), (16, 10000.0, 4.0, "ntk", 0.2),
                   (256, 10000.0, 2.0, "ntk", 0.3), (32, 10000.0, 1.0, "ntk", 0.01), (128, 10000.0, 8.0, "linear", 0.1),
                   (32, 10000.0, 1.5, "linear", 0.5)]


@test("q4", points=0.5, hidden=True)
def unchanged_pairs_match_reference(unchanged_pairs):
    got = yield [run(unchanged_pairs, *case) for case in UNCHANGED_CASES]
    import course_embed as ce
    for (d, base, factor, m, tolerance), out in zip(UNCHANGED_CASES, got):
        label = f"unchanged_pairs({d}, {base}, {factor}, {m!r}, {tolerance})"
        found = out.ok(label)
        assert isinstance(found, list) and all(type(i) is int for i in found), \
            f"{label} must return a Python list of ints (tensor.tolist() makes one)"
        ratio = ce.rope_parameters(d, base, {"rope_type": m, "factor": factor})[0] / ce.rope_frequencies(d, base)
        expected = torch.nonzero((ratio - 1).abs() < tolerance).flatten().tolist()
        assert found == expected, \
            f"{label} differs from the pairs with |theta_i' / theta_i - 1| < tolerance, in increasing order"
