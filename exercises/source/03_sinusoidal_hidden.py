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


def _timing_reference(length, d, base=10000.0, start=0):
    """Tensor2Tensor's table in float64: column i sin(p omega_i), column n + i cos(p omega_i), omega_i = base **
    (-i / (n - 1)), p = start ... start + length - 1."""
    n = d // 2
    omega = base ** (-torch.arange(n, dtype=torch.float64) / (n - 1))
    angles = torch.arange(start, start + length, dtype=torch.float64)[:, None] * omega
    return torch.cat((angles.sin(), angles.cos()), dim=1)


def _timing_cases(seed):
    gen = torch.Generator().manual_seed(seed + 4)
    cases = [(between(gen, 1, 64), 2 * between(gen, 2, 48), choose(gen, [10000.0, 100.0, 500000.0])) for _ in range(3)]
    return cases + [(between(gen, 2, 64), 2 * between(gen, 2, 48), choose(gen, [100.0, 500000.0]))]


@test("q4", points=0.75, hidden=True)
def timing_signal_matches_reference(timing_signal, *, seed):
    cases = _timing_cases(seed)
    got = yield [run(timing_signal, *case) for case in cases]
    for (length, d, base), out in zip(cases, got):
        label = f"timing_signal({length}, {d}, {base})"
        # the dtype is timing_signal_angles_in_float64's to grade: the values only here, after casting
        table = out.tensor(label, shape=(length, d)).double()
        error = (table - _timing_reference(length, d, base)).abs().max().item()
        default = (table - _timing_reference(length, d)).abs().max().item()
        assert error < 2e-5 or default >= 2e-5, f"{label} is the table for base 10000: use the base argument"
        # positions below 64: float32 angles stay within about 5e-6 here (timing_signal_angles_in_float64 grades them)
        assert error < 2e-5, f"{label} is off by up to {error:.1e} from the formula"


@test("q4", points=0.25, hidden=True)
def timing_signal_starts_at_start(timing_signal, *, seed):
    gen = torch.Generator().manual_seed(seed + 4)
    length, d, base = between(gen, 2, 20), 2 * between(gen, 2, 32), choose(gen, [10000.0, 100.0, 500000.0])
    start = between(gen, 1, 3000)
    got = yield [run(timing_signal, length, d, base, start), run(timing_signal, start + length, d, base)]
    label = f"timing_signal({length}, {d}, {base}, {start})"
    out = got[0].tensor(label, shape=(length, d)).float()  # the dtype is timing_signal_angles_in_float64's
    full = got[1].tensor(f"timing_signal({start + length}, {d}, {base})", shape=(start + length, d)).float()
    # only that row j is position start + j, compared with the answer's own table from position 0, whatever its
    # formula or layout (timing_signal_matches_reference grades those); row 0 of that table is sin 0 and cos 0
    row = full[0].tolist()
    assert row.count(0.0) == d // 2 and row.count(1.0) == d // 2 and bool(full.abs().le(1.0).all()), (
        f"timing_signal({start + length}, {d}, {base}): a table of sines and cosines (row 0 is sin 0 and cos 0)"
    )
    error = (out.double() - full[start:].double()).abs().max().item()
    assert error < 1e-5, f"{label} is not rows {start} on of the table from position 0 (off by up to {error:.1e})"


@test("q4", points=0.25, hidden=True)
def timing_signal_angles_in_float64(timing_signal, *, seed):
    gen = torch.Generator().manual_seed(seed + 4)
    length, d = between(gen, 9000, 12000), 2 * between(gen, 8, 40)
    got = yield run(timing_signal, length, d)
    label = f"timing_signal({length}, {d})"
    table = got.tensor(label, shape=(length, d), dtype=torch.float32)  # the one q4 test that grades the dtype
    error = (table[-1000:].double() - _timing_reference(length, d)[-1000:]).abs().max().item()
    assert error < 1e-2, f"{label}: the last 1000 positions are off by up to {error:.1e}, a wrong formula or layout"
    assert error < 2e-6, f"{label}: the last 1000 positions are off by up to {error:.1e} (float32 angles?)"


@test("q4", points=0.25, hidden=True)
def timing_signal_rejects_bad_widths(timing_signal, *, seed):
    gen = torch.Generator().manual_seed(seed + 4)
    length, d = between(gen, 1, 50), 2 * between(gen, 2, 50)
    got = yield [run(timing_signal, length, d), run(timing_signal, length, d + 1), run(timing_signal, length, 2)]
    # not the even width's values (timing_signal_matches_reference grades them), only that it is a table: row 0 holds
    # sin 0 and cos 0 (d / 2 zeros, d / 2 ones), every entry lies in [-1, 1]
    label = f"timing_signal({length}, {d}) (an even width)"
    table = got[0].tensor(label, shape=(length, d)).float()  # the dtype is timing_signal_angles_in_float64's
    row = table[0].tolist()
    assert row.count(0.0) == d // 2 and row.count(1.0) == d // 2 and bool(table.abs().le(1.0).all()), (
        f"{label}: a table of sines and cosines (row 0 is sin 0 and cos 0, every entry in [-1, 1])"
    )
    got[1].raises(f"timing_signal({length}, {d + 1}) (an odd d_model)", ValueError)
    got[2].raises(f"timing_signal({length}, 2) (a single pair)", ValueError)
