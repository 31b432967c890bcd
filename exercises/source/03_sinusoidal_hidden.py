"""Hidden tests of exercise 03: the instructor's only (not in a release). Each test gathers the answers' outputs
before its `yield` (in the sandbox) and compares them with course_embed's reference after it (in the grader)."""

import torch

from course_embed.tools.grading.probe import run, test

Q1_CASES = [(1, 2, 10000.0), (7, 6, 10000.0), (50, 64, 10000.0), (33, 10, 100.0), (0, 8, 10000.0)]


@test("q1", points=1, hidden=True)
def sinusoidal_matches_reference(sinusoidal):
    got = yield [run(sinusoidal, *case) for case in Q1_CASES]
    import course_embed as ce
    for (length, d, base), out in zip(Q1_CASES, got):
        table = out.tensor(f"sinusoidal({length}, {d}, {base})", shape=(length, d), dtype=torch.float32)
        torch.testing.assert_close(table, ce.sinusoidal_table(length, d, base), rtol=0, atol=1e-6,
                                   msg=lambda m: f"sinusoidal({length}, {d}, {base}) differs from the formula: {m}")


@test("q1", points=1, hidden=True)
def sinusoidal_angles_in_float64(sinusoidal):
    got = yield run(sinusoidal, 10001, 16)
    import course_embed as ce
    table = got.tensor("sinusoidal(10001, 16)", shape=(10001, 16), dtype=torch.float32)
    torch.testing.assert_close(table[9000:], ce.sinusoidal_table(10001, 16)[9000:], rtol=0, atol=2e-6,
                               msg=lambda m: f"positions 9000-10000 are off (float32 angles?): {m}")


@test("q1", points=0.5, hidden=True)
def sinusoidal_rejects_odd_width(sinusoidal):
    got = yield [run(sinusoidal, 10, 63)]
    got[0].raises("sinusoidal(10, 63)", ValueError)


Q2_CASES = [(0, 4, 10000.0), (1, 2, 10000.0), (7, 64, 10000.0), (-5, 10, 10000.0), (2.5, 6, 100.0),
            (1000, 16, 10000.0)]


@test("q2", points=1, hidden=True)
def rotation_matches_reference(rotation):
    got = yield [run(rotation, *case) for case in Q2_CASES]
    import course_embed as ce
    for (k, d, base), out in zip(Q2_CASES, got):
        m = out.tensor(f"rotation({k}, {d}, {base})", shape=(d, d), dtype=torch.float64)
        torch.testing.assert_close(m, ce.offset_rotation(k, d, base), rtol=0, atol=1e-12,
                                   msg=lambda text: f"rotation({k}, {d}, {base}) is not M_k: {text}")


@test("q2", points=1, hidden=True)
def rotation_composes_and_moves_the_table(rotation):
    got = yield [run(rotation, 4, 12), run(rotation, 9, 12), run(rotation, 13, 12), run(rotation, -4, 12)]
    import course_embed as ce
    a, b, ab, minus = (o.tensor(f"rotation(k, 12) ({i})", shape=(12, 12), dtype=torch.float64)
                       for i, o in enumerate(got))
    pe = ce.sinusoidal_table(30, 12, dtype=torch.float64)
    assert torch.allclose(pe[:20] @ a.T, pe[4:24], atol=1e-9), "rotation(4, 12) must move PE[p] to PE[p + 4]"
    torch.testing.assert_close(a @ b, ab, rtol=0, atol=1e-12, msg=lambda m: f"M_4 M_9 must equal M_13: {m}")
    torch.testing.assert_close(minus, a.T, rtol=0, atol=1e-12, msg=lambda m: f"M_-4 must be M_4 transposed: {m}")


@test("q3", points=1, hidden=True)
def first_rise_for_several_widths(first_rise):
    widths = (64, 8, 128)
    got = yield [run(first_rise, d) for d in widths]
    import course_embed as ce
    for d, out in zip(widths, got):
        k = out.number(f"first_rise({d})", int)
        dots = (table := ce.sinusoidal_table(600, d, dtype=torch.float64)) @ table[0]
        expected = next(j for j in range(1, 600) if dots[j] > dots[j - 1])
        assert k == expected, f"first_rise({d}) is not the first offset at which the dot product rises"
