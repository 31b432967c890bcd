"""Public tests of exercise 03 (what `grader.check` runs). Format: course_embed/tools/grading/probe.py.

The inputs are fixed here, and each expected value is stored (computed once in float64 and rounded)."""

import torch

from course_embed.tools.grading.probe import run, test

SMALL = torch.tensor([  # sinusoidal(6, 4)
    [0.0, 1.0, 0.0, 1.0],
    [0.841470985, 0.540302306, 0.009999833, 0.99995],
    [0.909297427, -0.416146837, 0.019998667, 0.999800007],
    [0.141120008, -0.989992497, 0.0299955, 0.999550034],
    [-0.756802495, -0.653643621, 0.039989334, 0.999200107],
    [-0.958924275, 0.283662185, 0.049979169, 0.99875026],
])
BASE_100 = torch.tensor([  # sinusoidal(3, 6, 100.0): at d = 4 the Tensor2Tensor spacing below equals base 10000's
    [0.0, 1.0, 0.0, 1.0, 0.0, 1.0],
    [0.841470985, 0.540302306, 0.213780666, 0.976881685, 0.046399223, 0.998922976],
    [0.909297427, -0.416146837, 0.417676835, 0.908595654, 0.092698501, 0.995694224],
])
BASE_10000_D6 = torch.tensor([  # sinusoidal(3, 6)
    [0.0, 1.0, 0.0, 1.0, 0.0, 1.0],
    [0.841470985, 0.540302306, 0.046399223, 0.998922976, 0.002154433, 0.999997679],
    [0.909297427, -0.416146837, 0.092698501, 0.995694224, 0.004308856, 0.999990717],
])
T2T_100 = torch.tensor([  # omega_i = exp(-i * log(100) / (d / 2 - 1)) at d = 6 (tensor2tensor's get_timing_signal)
    [0.0, 1.0, 0.0, 1.0, 0.0, 1.0],
    [0.841470985, 0.540302306, 0.099833417, 0.995004165, 0.009999833, 0.99995],
    [0.909297427, -0.416146837, 0.198669331, 0.980066578, 0.019998667, 0.999800007],
])
FAR = torch.tensor([  # sinusoidal(10001, 64)[10000]
    -0.305614389, -0.952155368, 0.039560468, -0.999217178, -0.037589165, 0.999293278, 0.812071497, 0.583557953,
    0.965182977, -0.261575649, 0.504452537, -0.863439423, 0.137530815, 0.990497489, 0.996419388, 0.084548229,
    0.826879541, 0.562379076, 0.811336567, -0.584579314, 0.003759793, -0.999992932, 0.661702986, 0.749766069,
    0.878680851, -0.477409638, -0.998602454, -0.052850146, 0.946702686, -0.322108714, 0.986328764, 0.164789472,
    -0.506365641, 0.862318872, -0.397511022, 0.917597399, -0.309374551, 0.950940265, -0.970896448, -0.239499661,
    0.205378138, 0.978682697, -0.988501674, 0.151209922, -0.87564118, 0.482962239, 0.695304659, 0.718715126,
    -0.544021111, -0.839071529, 0.937632744, 0.34762744, -0.612936761, 0.790131968, -0.879767243, -0.475404668,
    -0.020683532, -0.999786073, 0.696292407, -0.717758235, 0.978552493, -0.20599762, 0.971982132, 0.235054749,
])


@test("q1", points=0.25)
def sinusoidal_small_table_interleaved(sinusoidal):
    got = yield [run(sinusoidal, 6, 4)]
    pe = got[0].tensor("sinusoidal(6, 4)", shape=(6, 4), dtype=torch.float32)
    if torch.allclose(pe[:, [0, 2, 1, 3]], SMALL, atol=1e-6):
        raise AssertionError(
            "sinusoidal(6, 4) holds the sines in columns 0-1 and the cosines in 2-3 ([sin | cos] halves): interleave "
            "them, column 2i is sin(p * omega_i) and column 2i + 1 is cos(p * omega_i)"
        )
    for p in range(6):
        assert torch.allclose(pe[p], SMALL[p], atol=1e-6), (
            f"sinusoidal(6, 4)[{p}] is {[round(x, 4) for x in pe[p].tolist()]}, expected "
            f"{[round(x, 4) for x in SMALL[p].tolist()]}: column 2i is sin(p * base ** (-2i / d)), column 2i + 1 cos"
        )


@test("q1", points=0.25)
def sinusoidal_empty_table_and_odd_width(sinusoidal):
    got = yield [run(sinusoidal, 0, 8), run(sinusoidal, 10, 3), run(sinusoidal, 1, 4)]
    got[0].tensor("sinusoidal(0, 8) (no positions)", shape=(0, 8), dtype=torch.float32)
    got[1].raises("sinusoidal(10, 3) (an odd d_model has no last cos column)", ValueError)
    row = got[2].tensor("sinusoidal(1, 4)", shape=(1, 4), dtype=torch.float32)[0]
    assert sorted(row.tolist()) == [0.0, 0.0, 1.0, 1.0], (
        "sinusoidal(1, 4) must be position 0's row, sin 0 and cos 0 for each pair (two zeros and two ones)"
    )


@test("q1", points=0.5)
def sinusoidal_uses_its_base(sinusoidal):
    got = yield run(sinusoidal, 3, 6, 100.0)
    label = "sinusoidal(3, 6, 100.0)"
    pe = got.tensor(label, shape=(3, 6), dtype=torch.float32)
    if any(torch.allclose(pe[:, [0, 3, 1, 4, 2, 5]], t, atol=1e-6) for t in (BASE_100, BASE_10000_D6, T2T_100)):
        raise AssertionError(
            f"{label} holds [sin | cos] halves, a layout mistake: interleave the columns as the small table's check "
            f"says (column 2i sin, column 2i + 1 cos)"
        )
    assert not torch.allclose(pe, BASE_10000_D6, atol=1e-6), (
        f"{label} is the table for base 10000: omega_i = base ** (-2i / d) with the base argument"
    )
    assert not torch.allclose(pe, T2T_100, atol=1e-6), (
        f"{label} uses the Tensor2Tensor spacing omega_i = base ** (-i / (d / 2 - 1)) (the same as base 10000's at "
        f"d = 4 only): here omega_i = base ** (-2i / d)"
    )
    assert torch.allclose(pe, BASE_100, atol=1e-6), (
        f"{label}[2] is {[round(x, 4) for x in pe[2].tolist()]}, expected "
        f"{[round(x, 4) for x in BASE_100[2].tolist()]}: omega_i = base ** (-2i / d)"
    )


@test("q1", points=0.5)
def sinusoidal_float64_angles(sinusoidal):
    got = yield run(sinusoidal, 10001, 64)
    far = got.tensor("sinusoidal(10001, 64)", shape=(10001, 64), dtype=torch.float32)[10000]
    error = (far.double() - FAR.double()).abs().max().item()
    assert error < 1e-3, (
        f"sinusoidal(10001, 64)[10000] is off by {error:.1e}, more than precision explains: the formula or the "
        f"layout is wrong (the small table's check says which)"
    )
    assert error < 2e-6, (
        f"sinusoidal(10001, 64)[10000] is off by {error:.1e} (a float32 table rounds by about 6e-8): compute "
        f"positions, omega and the angles in float64 and cast the table to float32 at the end (grading also tries "
        f"other widths, lengths and bases)"
    )


ROWS = {  # sinusoidal(30, 8) in float64: positions 0, 5, 16 and 3 further
    0: [0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0],
    5: [-0.9589242747, 0.2836621855, 0.4794255386, 0.8775825619, 0.0499791693, 0.9987502604, 0.0049999792, 0.9999875],
    16: [-0.2879033167, -0.9576594803, 0.999573603, -0.0291995223, 0.1593182066, 0.9872272834, 0.0159993173,
         0.9998720027],
    3: [0.1411200081, -0.9899924966, 0.2955202067, 0.9553364891, 0.0299955002, 0.9995500337, 0.0029999955, 0.9999955],
    8: [0.9893582466, -0.1455000338, 0.7173560909, 0.6967067093, 0.079914694, 0.9968017063, 0.0079999147,
        0.9999680002],
    19: [0.1498772097, 0.9887046182, 0.9463000877, -0.3232895669, 0.188858895, 0.9820042351, 0.0189988569,
         0.9998195054],
}
M5 = torch.tensor([  # rotation(5, 4)
    [0.2836621855, -0.9589242747, 0.0, 0.0],
    [0.9589242747, 0.2836621855, 0.0, 0.0],
    [0.0, 0.0, 0.9987502604, 0.0499791693],
    [0.0, 0.0, -0.0499791693, 0.9987502604],
], dtype=torch.float64)


def _blocks(pairs):
    """The block-diagonal matrix of stored ``(cos, sin)`` pairs, block i = [[c, s], [-s, c]] at rows 2i, 2i + 1."""
    m = torch.zeros(2 * len(pairs), 2 * len(pairs), dtype=torch.float64)
    for i, (c, s) in enumerate(pairs):
        m[2 * i, 2 * i], m[2 * i, 2 * i + 1], m[2 * i + 1, 2 * i], m[2 * i + 1, 2 * i + 1] = c, s, -s, c
    return m


# rotation(3, 6, 100.0), rotation(3, 6) and the Tensor2Tensor spacing's M_3 at base 100 (equal to base 10000's at
# d = 4 only), from their blocks' stored (cos(3 omega_i), sin(3 omega_i))
M3_BASE_100 = _blocks([(-0.9899924966, 0.1411200081), (0.7982992214, 0.6022610341), (0.9903206991, 0.1387981011)])
M3_BASE_10000 = _blocks([(-0.9899924966, 0.1411200081), (0.9903206991, 0.1387981011), (0.9999791129, 0.0064632591)])
M3_T2T_100 = _blocks([(-0.9899924966, 0.1411200081), (0.9553364891, 0.2955202067), (0.9995500337, 0.0299955002)])
FAR_BLOCKS = [  # rotation(12345.5, 8): (cos, sin) of block i, at [2i, 2i] and [2i, 2i + 1]
    (0.57423360531, -0.818691496556),
    (-0.995403886599, 0.095765873587),
    (-0.59551761097, -0.803342252732),
    (0.975707085661, -0.2190791706),
]


@test("q2", points=0.25)
def rotation_moves_three_positions(rotation):
    got = yield [run(rotation, 3, 8), run(rotation, 2.5, 4)]
    m = got[0].tensor("rotation(3, 8)", shape=(8, 8), dtype=torch.float64)
    rows = {p: torch.tensor(row, dtype=torch.float64) for p, row in ROWS.items()}
    for p in (0, 5, 16):
        if torch.allclose(m.T @ rows[p], rows[p + 3], atol=1e-9) and not torch.allclose(m @ rows[p], rows[p + 3]):
            raise AssertionError(
                f"rotation(3, 8) @ PE[{p}] must equal PE[{p + 3}], and its transpose does: the textbook block "
                f"[[c, -s], [s, c]] turns (x, y); here the pair is (sin, cos), so work the block out from sin(a + b) "
                f"and cos(a + b)"
            )
        assert torch.allclose(m @ rows[p], rows[p + 3], atol=1e-9), (
            f"rotation(3, 8) @ PE[{p}] must equal PE[{p + 3}] (column vectors): block i acts on entries 2i, 2i + 1"
        )
    half = got[1].tensor("rotation(2.5, 4)", shape=(4, 4), dtype=torch.float64)
    assert torch.allclose(half @ half, M5, atol=1e-9), (
        "rotation(2.5, 4) applied twice must equal rotation(5, 4): k may be any real number, not only an int"
    )


@test("q2", points=0.25)
def rotation_rejects_odd_width(rotation):
    got = yield [run(rotation, 1, 7), run(rotation, 0, 4)]
    got[0].raises("rotation(1, 7) (an odd d_model)", ValueError)
    m = got[1].tensor("rotation(0, 4)", shape=(4, 4), dtype=torch.float64)
    assert torch.equal(m, torch.eye(4, dtype=torch.float64)), "rotation(0, 4) must be the identity: M_0 moves nothing"


@test("q2", points=0.5)
def rotation_uses_its_base_and_float64_angles(rotation):
    got = yield [run(rotation, 3, 6, 100.0), run(rotation, 12345.5, 8)]
    m = got[0].tensor("rotation(3, 6, 100.0)", shape=(6, 6), dtype=torch.float64)
    if any(torch.allclose(m.T, t, rtol=0, atol=1e-6) for t in (M3_BASE_100, M3_BASE_10000, M3_T2T_100)):
        raise AssertionError(
            "rotation(3, 6, 100.0) is the transpose of M_3, a layout mistake: work each block out from sin(a + b) "
            "and cos(a + b), as the check of rotation(3, 8) @ PE[p] says"
        )
    assert not torch.allclose(m, M3_BASE_10000, rtol=0, atol=1e-6), (
        "rotation(3, 6, 100.0) is M_3 for base 10000: omega_i = base ** (-2i / d) with the base argument"
    )
    assert not torch.allclose(m, M3_T2T_100, rtol=0, atol=1e-6), (
        "rotation(3, 6, 100.0) uses the Tensor2Tensor spacing omega_i = base ** (-i / (d / 2 - 1)) (the same as base "
        "10000's at d = 4 only): here omega_i = base ** (-2i / d)"
    )
    error = (m - M3_BASE_100).abs().max().item()
    assert error < 1e-5, f"rotation(3, 6, 100.0) is off from M_3 by up to {error:.1e}: omega_i = base ** (-2i / d)"
    far = got[1].tensor("rotation(12345.5, 8)", shape=(8, 8), dtype=torch.float64)
    expected = torch.tensor(FAR_BLOCKS, dtype=torch.float64)
    blocks = torch.stack([far[0::2, 0::2].diagonal(), far[0::2, 1::2].diagonal()], dim=1)
    far_error = (blocks - expected).abs().max().item()
    assert far_error < 1e-3, f"rotation(12345.5, 8) is off from M_k by up to {far_error:.1e}: the formula is wrong"
    for label, e in (("rotation(12345.5, 8)", far_error), ("rotation(3, 6, 100.0)", error)):
        assert e < 1e-9, (
            f"{label} is off from M_k by up to {e:.1e} (float64 rounds to about 1e-12): compute omega and the "
            f"angles k * omega in float64, as in question 1"
        )


@test("q3", points=1)
def first_rise_is_an_int_and_right_for_d16(first_rise):
    got = yield run(first_rise, 16)
    k = got.number("first_rise(16)", int)
    assert k == 4, (
        f"first_rise(16) is {k}, expected 4: the smallest k >= 1 with PE[0] . PE[k] > PE[0] . PE[k - 1] (return k, "
        f"not the index of the difference; grading tries other widths)"
    )


T2T_SMALL = torch.tensor([  # timing_signal(3, 8, 100.0): omega_i = 100 ** (-i / 3), sines of pairs 0-3, then cosines
    [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0],
    [0.841470985, 0.213780666, 0.046399223, 0.009999833, 0.540302306, 0.976881685, 0.998922976, 0.99995],
    [0.909297427, 0.417676835, 0.092698501, 0.019998667, -0.416146837, 0.908595654, 0.995694224, 0.999800007],
])
T2T_PAPER_SPACING = torch.tensor([  # the same layout with the paper's omega_i = 100 ** (-2i / 8)
    [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0],
    [0.841470985, 0.310983593, 0.099833417, 0.031617506, 0.540302306, 0.95041528, 0.995004165, 0.999500042],
    [0.909297427, 0.591127117, 0.198669331, 0.063203398, -0.416146837, 0.80657841, 0.980066578, 0.998000667],
])
T2T_BASE_10000 = torch.tensor([  # timing_signal(3, 8): omega_i = 10000 ** (-i / 3)
    [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0],
    [0.841470985, 0.046399223, 0.002154433, 0.0001, 0.540302306, 0.998922976, 0.999997679, 0.999999995],
    [0.909297427, 0.092698501, 0.004308856, 0.0002, -0.416146837, 0.995694224, 0.999990717, 0.99999998],
])
T2T_FAR = torch.tensor([  # timing_signal(10001, 64)[10000]
    -0.305614389, 0.225170615, -0.175121254, -0.975428488, -0.34787453, 0.959407486, -0.92162813, -0.677776868,
    -0.997269502, -0.980274546, -0.390325547, -0.582573196, 0.143111572, 0.306873855, -0.800022116, 0.221544465,
    -0.980375048, 0.934975377, -0.439959287, -0.711964521, 0.904793282, 0.615782183, 0.935812335, -0.974900256,
    0.988991068, -0.331237297, -0.956789268, -0.139875046, 0.646691288, 0.971144433, 0.974830683, 0.841470985,
    -0.952155368, -0.974319349, -0.984546874, -0.220316284, 0.937541099, -0.282023537, -0.388074208, 0.73526765,
    0.073848096, 0.197640618, -0.920676907, -0.812778243, 0.989706562, -0.951750197, 0.59997051, -0.97515027,
    -0.197141486, 0.354712623, -0.89801772, -0.702215438, 0.42585105, 0.787916432, -0.352498616, -0.222642069,
    -0.147975225, 0.943547483, -0.290782214, -0.990169163, -0.762751845, -0.238492117, 0.222946495, 0.540302306,
])
#: column orders that read a table in another layout as this one: interleaved (sin, cos of pair 0, then pair 1, ...)
#: and [cos | sin] (the cosines first)
_FROM_INTERLEAVED = [0, 2, 4, 6, 1, 3, 5, 7]
_FROM_COS_FIRST = [4, 5, 6, 7, 0, 1, 2, 3]


def _rounded_rows(t: torch.Tensor) -> list:
    return [[round(x, 4) for x in row] for row in t.tolist()]


@test("q4", points=0.5)
def timing_signal_sines_then_cosines_with_its_spacing(timing_signal):
    got = yield run(timing_signal, 3, 8, 100.0)
    label = "timing_signal(3, 8, 100.0)"
    pe = got.tensor(label, shape=(3, 8), dtype=torch.float32).double()
    for expected in (T2T_SMALL, T2T_PAPER_SPACING):
        if torch.allclose(pe[:, _FROM_INTERLEAVED], expected.double(), atol=1e-6):
            raise AssertionError(
                f"{label} interleaves the columns (sin, cos of pair 0, then of pair 1, ...), the paper's layout of "
                f"question 1: here columns 0 to n - 1 hold the sines of pairs 0 to n - 1 and columns n to d - 1 their "
                f"cosines (n = d / 2)"
            )
        if torch.allclose(pe[:, _FROM_COS_FIRST], expected.double(), atol=1e-6):
            raise AssertionError(f"{label} puts the cosines first: the sines come first, then the cosines")
    assert not torch.allclose(pe, T2T_PAPER_SPACING.double(), atol=1e-6), (
        f"{label} uses the paper's frequencies omega_i = base ** (-2i / d): here omega_i = base ** (-i / (n - 1)) "
        f"with n = d / 2, so the slowest pair's is exactly 1 / base (at d = 8, pair 1 turns by 100 ** (-1 / 3) = "
        f"0.2154 radians per position, not 100 ** (-1 / 4) = 0.3162)"
    )
    assert not torch.allclose(pe, T2T_BASE_10000.double(), atol=1e-6), (
        f"{label} is the table for base 10000: omega_i = base ** (-i / (n - 1)) with the base argument"
    )
    assert torch.allclose(pe, T2T_SMALL.double(), atol=1e-6), (
        f"{label} is {_rounded_rows(pe)}, expected {_rounded_rows(T2T_SMALL)}: column i is sin(p * omega_i) and "
        f"column n + i cos(p * omega_i), omega_i = base ** (-i / (n - 1)), n = d / 2, for the positions p = 0, 1, 2"
    )


@test("q4", points=0.25)
def timing_signal_rows_start_at_start(timing_signal):
    got = yield [run(timing_signal, 2, 8, 100.0, start=5), run(timing_signal, 8, 8, 100.0)]
    label = "timing_signal(2, 8, 100.0, start=5)"
    out = got[0].tensor(label, shape=(2, 8), dtype=torch.float32)
    full = got[1].tensor("timing_signal(8, 8, 100.0)", shape=(8, 8), dtype=torch.float32)
    # only that row j is position start + j, whatever the formula (the check of timing_signal(3, 8, 100.0) grades
    # that): the rows are compared with the answer's own table from position 0, whose row 0 is sin 0 and cos 0
    assert sorted(full[0].tolist()) == [0.0] * 4 + [1.0] * 4 and bool(full.abs().le(1.0).all()), (
        "timing_signal(8, 8, 100.0) must be a table of sines and cosines whose row 0 (position 0) holds sin 0 and "
        "cos 0 of each pair (four zeros and four ones)"
    )
    assert not torch.allclose(out, full[:2], atol=1e-6), (
        f"{label} is rows 0 and 1, positions 0 and 1: row j holds position start + j (here 5 and 6)"
    )
    assert not (torch.allclose(out, full[4:6], atol=1e-6) or torch.allclose(out, full[6:8], atol=1e-6)), (
        f"{label} is off by one position: row j holds position start + j, so rows 0 and 1 are positions 5 and 6"
    )
    assert torch.allclose(out, full[5:7], atol=1e-6), (
        f"{label} must equal rows 5 and 6 of timing_signal(8, 8, 100.0): row j holds position start + j"
    )


@test("q4", points=0.5)
def timing_signal_float64_angles(timing_signal):
    got = yield run(timing_signal, 10001, 64)
    label = "timing_signal(10001, 64)"
    far = got.tensor(label, shape=(10001, 64), dtype=torch.float32)[10000]
    error = (far.double() - T2T_FAR.double()).abs().max().item()
    assert error < 1e-2, (
        f"{label}[10000] is off by {error:.1e}, more than precision explains: the formula or the layout is wrong "
        f"(the check of timing_signal(3, 8, 100.0) says which)"
    )
    assert error < 2e-6, (
        f"{label}[10000] is off by {error:.1e} (a float32 table rounds by about 6e-8): compute the positions, omega "
        f"and the angles in float64 and cast the table to float32 at the end"
    )


@test("q4", points=0.25)
def timing_signal_empty_table_and_bad_widths(timing_signal):
    got = yield [run(timing_signal, 0, 8), run(timing_signal, 1, 4), run(timing_signal, 5, 7),
                 run(timing_signal, 5, 2)]
    got[0].tensor("timing_signal(0, 8) (no positions)", shape=(0, 8), dtype=torch.float32)
    row = got[1].tensor("timing_signal(1, 4)", shape=(1, 4), dtype=torch.float32)[0]
    assert sorted(row.tolist()) == [0.0, 0.0, 1.0, 1.0], (
        "timing_signal(1, 4) must be position 0's row, sin 0 and cos 0 for each pair (two zeros and two ones)"
    )
    got[2].raises("timing_signal(5, 7) (an odd d_model)", ValueError)
    got[3].raises("timing_signal(5, 2) (a single pair: the step divides by n - 1 = 0)", ValueError)
