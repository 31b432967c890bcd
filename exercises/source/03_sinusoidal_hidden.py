"""Hidden tests of exercise 03: the instructor's only (not in a release). Each test draws its inputs from the grading
run's secret `seed` (fixed per exercise and grading key; every base-dependent test includes a base other than 10000) and gathers the answers' outputs before its `yield` (in the sandbox); after it, in the grader,
it rebuilds the same inputs and compares with course_embed's reference."""

import torch

from course_embed.tools.grading.probe import between, choose, run, test


def _table_cases(seed):
    gen = torch.Generator().manual_seed(seed)
    cases = [(between(gen, 1, 80), 2 * between(gen, 1, 48), choose(gen, [10000.0, 100.0, 500000.0])) for _ in range(3)]
    return cases + [(between(gen, 2, 80), 2 * between(gen, 2, 48), choose(gen, [100.0, 500000.0]))]


@test("q1", points=1, hidden=True)
def sinusoidal_matches_reference(sinusoidal, *, seed):
    cases = _table_cases(seed)
    got = yield [run(sinusoidal, *case) for case in cases]
    import course_embed as ce

    for (length, d, base), out in zip(cases, got):
        label = f"sinusoidal({length}, {d}, {base})"
        table = out.tensor(label, shape=(length, d), dtype=torch.float32)
        error = (table.double() - ce.sinusoidal_table(length, d, base, dtype=torch.float64)).abs().max().item()
        default = (table.double() - ce.sinusoidal_table(length, d, dtype=torch.float64)).abs().max().item()
        assert error < 1e-6 or default >= 1e-6, f"{label} is the table for base 10000: use the base argument"
        assert error < 1e-6, f"{label} is off by up to {error:.1e} from the formula"


@test("q1", points=1, hidden=True)
def sinusoidal_angles_in_float64(sinusoidal, *, seed):
    gen = torch.Generator().manual_seed(seed)
    length, d = between(gen, 9000, 12000), 2 * between(gen, 8, 40)
    got = yield run(sinusoidal, length, d)
    import course_embed as ce

    label = f"sinusoidal({length}, {d})"
    table = got.tensor(label, shape=(length, d), dtype=torch.float32)
    error = (table[-1000:].double() - ce.sinusoidal_table(length, d, dtype=torch.float64)[-1000:]).abs().max().item()
    assert error < 2e-6, f"{label}: the last 1000 positions are off by up to {error:.1e} (float32 angles?)"


@test("q1", points=0.5, hidden=True)
def sinusoidal_rejects_odd_width(sinusoidal, *, seed):
    gen = torch.Generator().manual_seed(seed)
    length, d = between(gen, 1, 50), 2 * between(gen, 1, 50)
    got = yield [run(sinusoidal, length, d), run(sinusoidal, length, d + 1)]
    # not the even-width table's values (sinusoidal_matches_reference's), only that it is one, whatever its layout
    # or frequencies: row 0 holds sin 0 and cos 0 (d / 2 zeros, d / 2 ones), every entry lies in [-1, 1]; an answer
    # that raises for every width, or returns zeros, earns nothing here
    label = f"sinusoidal({length}, {d}) (an even width)"
    table = got[0].tensor(label, shape=(length, d), dtype=torch.float32)
    row = table[0].tolist()
    assert row.count(0.0) == d // 2 and row.count(1.0) == d // 2 and bool(table.abs().le(1.0).all()), (
        f"{label}: a sinusoidal table (row 0 is sin 0 and cos 0, every entry in [-1, 1])"
    )
    got[1].raises(f"sinusoidal({length}, {d + 1})", ValueError)


def _rotation_cases(seed):
    gen = torch.Generator().manual_seed(seed)
    cases = [(between(gen, -50, 50), 2 * between(gen, 1, 40), 10000.0) for _ in range(3)]
    return cases + [(between(gen, 1, 400) / 8, 2 * between(gen, 2, 10), choose(gen, [100.0, 500000.0]))]


@test("q2", points=1, hidden=True)
def rotation_matches_reference(rotation, *, seed):
    cases = _rotation_cases(seed)
    got = yield [run(rotation, *case) for case in cases]
    import course_embed as ce

    for (k, d, base), out in zip(cases, got):
        label = f"rotation({k}, {d}, {base})"
        m = out.tensor(label, shape=(d, d), dtype=torch.float64)
        error = (m - ce.offset_rotation(k, d, base)).abs().max().item()
        default = (m - ce.offset_rotation(k, d)).abs().max().item()
        assert error < 1e-12 or default >= 1e-12, f"{label} is M_k for base 10000: use the base argument"
        assert error < 1e-12 or error > 1e-5, (
            f"{label} is off from M_k by up to {error:.1e}, a float32 rounding: compute the angles in float64"
        )
        assert error < 1e-12, f"{label} is off from M_k by up to {error:.1e}"


@test("q2", points=1, hidden=True)
def rotation_composes_and_moves_the_table(rotation, *, seed):
    gen = torch.Generator().manual_seed(seed)
    a, b, d = between(gen, 1, 20), between(gen, 1, 20), 2 * between(gen, 2, 12)
    got = yield [run(rotation, a, d), run(rotation, b, d), run(rotation, a + b, d), run(rotation, -a, d)]
    import course_embed as ce

    ma, mb, mab, minus = (
        o.tensor(f"rotation({k}, {d})", shape=(d, d), dtype=torch.float64) for k, o in zip((a, b, a + b, -a), got)
    )
    pe = ce.sinusoidal_table(30 + a, d, dtype=torch.float64)
    error = (pe[:30] @ ma.T - pe[a : 30 + a]).abs().max().item()
    assert error < 1e-9 or error > 1e-4, (
        f"rotation({a}, {d}) moves PE[p] to PE[p + {a}] only to {error:.1e}, a float32 rounding: compute the angles "
        f"in float64"
    )
    assert error < 1e-9, f"rotation({a}, {d}) must move PE[p] to PE[p + {a}] (off by up to {error:.1e})"
    assert torch.allclose(ma @ mb, mab, atol=1e-12), f"rotation({a}, {d}) @ rotation({b}, {d}) must equal M_{a + b}"
    assert torch.allclose(minus, ma.T, atol=1e-12), f"rotation({-a}, {d}) must be rotation({a}, {d}) transposed"


@test("q3", points=1, hidden=True)
def first_rise_for_several_widths(first_rise, *, seed):
    gen = torch.Generator().manual_seed(seed)
    widths = (2 * between(gen, 2, 16), 2 * between(gen, 17, 40), 2 * between(gen, 41, 128), 512, 1024)  # 44, 69
    got = yield [run(first_rise, d) for d in widths]
    import course_embed as ce

    for d, out in zip(widths, got):
        k = out.number(f"first_rise({d})", int)
        dots = (table := ce.sinusoidal_table(1000, d, dtype=torch.float64)) @ table[0]
        expected = next(j for j in range(1, 1000) if dots[j] > dots[j - 1])
        assert k == expected, f"first_rise({d}) is {k}, expected {expected}: the first k at which the dot product rises"
