"""Public tests of exercise 03 (what `grader.check` runs). Format: course_embed/tools/grading/probe.py."""

import math

import torch

from course_embed.tools.grading.probe import run, test


@test("q1", points=1)
def sinusoidal_small_table(sinusoidal):
    got = yield run(sinusoidal, 6, 4)
    pe = got.tensor("sinusoidal(6, 4)", shape=(6, 4), dtype=torch.float32)
    assert torch.allclose(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0])), "position 0 is (sin 0, cos 0, ...) = (0, 1, 0, 1)"
    assert math.isclose(pe[3, 0].item(), math.sin(3), abs_tol=1e-6), "column 0 is sin(p) (omega_0 = 1)"
    assert math.isclose(pe[3, 3].item(), math.cos(3 / 100), abs_tol=1e-6), "column 3 is cos(p * base ** (-2/4))"


@test("q1", points=0.5)
def sinusoidal_float64_angles_and_odd_width(sinusoidal):
    got = yield [run(sinusoidal, 10001, 4), run(sinusoidal, 10, 3)]
    far = got[0].tensor("sinusoidal(10001, 4)", shape=(10001, 4), dtype=torch.float32)
    p = 10000
    assert abs(far[p, 2].item() - math.sin(p * 0.01)) < 2e-6, \
        "at position 10000 the angle is off: compute the angles in float64, cast the table at the end"
    got[1].raises("sinusoidal(10, 3)", ValueError)


@test("q2", points=1)
def rotation_moves_three_positions(rotation):
    got = yield [run(rotation, 3, 8), run(rotation, 2.5, 4), run(rotation, 1, 7)]
    m = got[0].tensor("rotation(3, 8)", shape=(8, 8), dtype=torch.float64)
    pe = _table(20, 8)
    for p in (0, 5, 16):
        assert torch.allclose(m @ pe[p], pe[p + 3], atol=1e-9), f"rotation(3, 8) @ PE[{p}] must equal PE[{p + 3}]"
    half = got[1].tensor("rotation(2.5, 4)", shape=(4, 4), dtype=torch.float64)
    assert torch.allclose(half @ half, _rotation_closed_form(5.0, 4), atol=1e-9), "k may be any real number (2.5)"
    got[2].raises("rotation(1, 7)", ValueError)


@test("q3", points=1)
def first_rise_is_an_int_and_right_for_d16(first_rise):
    got = yield run(first_rise, 16)
    k = got.number("first_rise(16)", int)
    pe = _table(400, 16)
    dots = pe @ pe[0]
    expected = next(j for j in range(1, 400) if dots[j] > dots[j - 1])
    assert k == expected, "first_rise(16) is not the smallest k >= 1 with PE[0] . PE[k] > PE[0] . PE[k - 1]"


def _table(length, d):
    """The sinusoidal table in float64, written out (the checks run where course_embed may be missing)."""
    angles = torch.arange(length, dtype=torch.float64)[:, None] * 10000.0 ** (
        -torch.arange(0, d, 2, dtype=torch.float64) / d)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)


def _rotation_closed_form(k, d):
    angles = k * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    m = torch.zeros(d, d, dtype=torch.float64)
    for i, a in enumerate(angles.tolist()):
        m[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]])
    return m
