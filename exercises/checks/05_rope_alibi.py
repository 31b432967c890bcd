"""Public tests of exercise 05 (what `grader.check` runs). Format: course_embed/tools/grading/probe.py.

The inputs are fixed here, and each expected value is stored (computed once in float64)."""

import math

import torch

from course_embed.tools.grading.probe import as_tensor, run, test

#: rope of x = (1, 0, 1, 0, ...) (every pair the unit vector) at positions 7, 8, 9, head_dim 8: (cos, sin) of m theta_i
TURNED = torch.tensor([
    [0.753902254343, 0.656986598719, 0.764842187284, 0.644217687238, 0.997551000253, 0.069942847338, 0.9999755001,
     0.006999942833],
    [-0.145500033809, 0.989358246623, 0.696706709347, 0.7173560909, 0.996801706303, 0.079914693969, 0.999968000171,
     0.007999914667],
    [-0.911130261885, 0.412118485242, 0.621609968271, 0.783326909627, 0.995952733012, 0.089878549198, 0.999959500273,
     0.0089998785],
], dtype=torch.float64)
COS2, SIN2 = -0.416146836547, 0.909297426826  # position 2, pair 0 (theta_0 = 1)
FAR = torch.tensor([  # rope of (1, 0, 1, 0, 1, 0, 1, 0) at position 3000, head_dim 8
    -0.975682199886, 0.219189974283, -0.022096619279, -0.999755839901, 0.154251449888, -0.988031624093, -0.9899924966,
    0.14112000806,
], dtype=torch.float64)

ONE = torch.tensor([  # rope of (1, 0, 1, 0, 1, 0, 1, 0) at position 1, head_dim 8: (cos, sin) of theta_i
    0.540302305868, 0.841470984808, 0.995004165278, 0.099833416647, 0.999950000417, 0.009999833334, 0.9999995,
    0.000999999833,
], dtype=torch.float64)
ONE_BASE_100 = torch.tensor([  # the same with base 100
    0.540302305868, 0.841470984808, 0.950415280255, 0.310983592907, 0.995004165278, 0.099833416647, 0.999500041665,
    0.031617506402,
], dtype=torch.float64)


def _pairs(seq, head_dim, dtype):
    x = torch.zeros(1, 1, seq, head_dim, dtype=dtype)
    x[..., 0::2] = 1.0
    return x


def _e0(rope):
    x = torch.zeros(1, 1, 3, 4)
    x[..., 0] = 1.0  # the unit vector e_0 at positions 0, 1 and 2
    out = rope(x)
    return {"out": out, "x_after": x}


@test("q1", points=1)
def rope_turns_pair_0_by_the_position(rope):
    got = yield run(_e0, rope)
    r = got.ok("rope(x) on e_0 at positions 0, 1, 2 (head_dim 4, float32)")
    out = as_tensor(r["out"], "rope(x)")
    assert out.shape == (1, 1, 3, 4) and out.dtype == torch.float32, (
        f"rope(x) must keep x's shape (1, 1, 3, 4) and dtype float32, got {tuple(out.shape)} {out.dtype}"
    )
    x = torch.zeros(1, 1, 3, 4)
    x[..., 0] = 1.0
    assert torch.equal(as_tensor(r["x_after"], "x"), x), "rope(x) changed x: write the result to a new tensor"
    assert torch.allclose(out[0, 0, 0], torch.tensor([1.0, 0.0, 0.0, 0.0])), "rope(x): position 0 must not turn"
    turned = out[0, 0, 2].double()
    if abs(turned[2].item() - SIN2) < 1e-6 and abs(turned[1].item()) < 1e-6:
        raise AssertionError(
            "rope(x) on e_0 at position 2 moved it into dimension 2: that is the rotate-half layout (pairs i and "
            "i + head_dim / 2); here pair i is dimensions 2i and 2i + 1 (the interleaved layout)"
        )
    assert torch.allclose(turned, torch.tensor([COS2, SIN2, 0.0, 0.0], dtype=torch.float64), atol=1e-6), (
        f"rope(x) on e_0 at position 2 must be (cos 2, sin 2, 0, 0) = ({COS2:.4f}, {SIN2:.4f}, 0, 0): pair 0 "
        f"(dims 0 and 1) turns by m * theta_0 = 2 radians, got {[round(v, 4) for v in turned.tolist()]}"
    )


def _rounded(t):
    return [round(v, 4) for v in t.tolist()]


@test("q1", points=0.5)
def rope_uses_its_base(rope):
    got = yield run(rope, _pairs(1, 8, torch.float64), offset=1, base=100.0)
    one = got.tensor("rope(x, offset=1, base=100.0) in float64", shape=(1, 1, 1, 8), dtype=torch.float64)[0, 0, 0]
    assert not torch.allclose(one, ONE, atol=1e-6), (
        "rope(x, offset=1, base=100.0) turns the pairs by base 10000's angles: theta_i = base ** (-2i / head_dim) "
        "with the base argument"
    )
    assert torch.allclose(one, ONE_BASE_100, atol=1e-6), (
        f"rope(x, offset=1, base=100.0) on (1, 0, 1, 0, ...) must be the (cos, sin) of theta_i = 100 ** (-2i / 8) "
        f"= {_rounded(ONE_BASE_100)}, got {_rounded(one)}"
    )


@test("q1", points=0.5)
def rope_uses_the_offset_in_float64_and_rejects_bad_shapes(rope):
    got = yield [
        run(rope, _pairs(3, 8, torch.float64), offset=7),
        run(rope, _pairs(1, 8, torch.float64), offset=3000),
        run(rope, torch.zeros(1, 2, 3, 5)),
        run(rope, torch.zeros(2, 3, 8)),
        run(rope, _pairs(1, 8, torch.float64), offset=1),
    ]
    one = got[4].tensor("rope(x, offset=1) in float64", shape=(1, 1, 1, 8), dtype=torch.float64)[0, 0, 0]
    assert torch.allclose(one, ONE, atol=1e-6), (
        f"rope(x, offset=1) on (1, 0, 1, 0, ...) (head_dim 8) must turn pair i by theta_i = base ** (-2i / head_dim) "
        f"= 1, 0.1, 0.01, 0.001 radians, i.e. {_rounded(ONE)}, got {_rounded(one)}: check the frequencies"
    )
    tail = got[0].tensor("rope(x, offset=7) on 3 positions, head_dim 8, float64", shape=(1, 1, 3, 8),
                         dtype=torch.float64)
    assert torch.allclose(tail[0, 0], TURNED, atol=1e-6), (
        "rope(x, offset=7): the 3 tokens are at positions 7, 8, 9 (the offset is the first token's position; if the "
        "check on e_0 fails too, fix that first)"
    )
    far = got[1].tensor("rope(x, offset=3000) in float64", shape=(1, 1, 1, 8), dtype=torch.float64)[0, 0, 0]
    error = (far - FAR).abs().max().item()
    assert error < 1e-9, (
        f"rope(x, offset=3000) in float64 is off by {error:.1e}: compute the positions and angles in float64 "
        f"(grading also tries other shapes, dtypes, offsets and bases)"
    )
    got[2].raises("rope(x of shape (1, 2, 3, 5)) (an odd head_dim)", ValueError)
    got[3].raises("rope(x of shape (2, 3, 8)) (not 4-D: batch, heads, seq, head_dim)", ValueError)


@test("q2", points=1)
def slopes_for_8_and_6_heads(alibi_slopes):
    got = yield [run(alibi_slopes, 8), run(alibi_slopes, 6), run(alibi_slopes, 0)]
    eight = got[0].tensor("alibi_slopes(8)", shape=(8,), dtype=torch.float32)
    assert torch.allclose(eight, torch.tensor([2.0**-k for k in range(1, 9)])), (
        f"alibi_slopes(8) must be 1/2, 1/4, ..., 1/256 (2 ** (-8k / 8)), got {[round(v, 4) for v in eight.tolist()]}"
    )
    six = got[1].tensor("alibi_slopes(6)", shape=(6,), dtype=torch.float32)
    expected = [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    assert torch.allclose(six, torch.tensor(expected)), (
        "alibi_slopes(6) must be the 4 slopes for 4 heads (1/4, 1/16, 1/64, 1/256), then the 1st and 3rd of the "
        "8-head sequence (1/2, 1/8) (grading also tries other head counts)"
    )
    got[2].raises("alibi_slopes(0)", ValueError)


@test("q3", points=1)
def recent_weight_of_head_5(recent_weight):
    got = yield run(recent_weight, 5)
    value = got.number("recent_weight(5)")
    assert abs(value - 0.255821) <= 0.000051, (
        f"recent_weight(5) is {value:.5f}, expected 0.2558 to 4 decimals: head 5 of 8 has slope 1/64; softmax of "
        f"-slope * distance over the 128 keys of the last query (distances 127 ... 0), summed over the 16 nearest "
        f"(itself included); it uses your alibi_slopes, so check question 2 first"
    )


METHODS = ("linear", "ntk")
PLAIN = torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=torch.float64)  # 10000 ** (-2i / 8)


@test("q4", points=1)
def extended_frequencies_give_plain_rope_at_factor_1_and_slow_down_as_asked(extended_frequencies):
    got = yield [run(extended_frequencies, 8, 10000.0, factor, m) for factor in (1.0, 4.0) for m in METHODS] + [
        run(extended_frequencies, 8, 10000.0, 2.0, "yarn")
    ]
    labels = [f"extended_frequencies(8, 10000.0, {factor}, {m!r})" for factor in (1.0, 4.0) for m in METHODS]
    freqs = [out.tensor(label, shape=(4,), dtype=torch.float64) for label, out in zip(labels, got)]
    for label, found in zip(labels[:2], freqs[:2]):
        assert torch.allclose(found, PLAIN, rtol=1e-12, atol=0), (
            f"{label} must be plain RoPE's frequencies base ** (-2i / head_dim) = 1, 0.1, 0.01, 0.001, in float64"
        )
    assert torch.allclose(freqs[2], PLAIN / 4, rtol=1e-12, atol=0), (
        f"{labels[2]} must be 0.25, 0.025, 0.0025, 0.00025: position interpolation divides every frequency by the "
        f"factor"
    )
    ntk = freqs[3]
    assert math.isclose(ntk[0].item(), 1.0, rel_tol=1e-12) and math.isclose(ntk[-1].item(), 0.00025, rel_tol=1e-12), (
        f"{labels[3]}: NTK-aware scaling keeps the fastest pair's frequency (1) and divides the slowest by the factor "
        f"(0.001 / 4): the base becomes base * factor ** (d / (d - 2))"
    )
    got[4].raises("extended_frequencies(8, 10000.0, 2.0, 'yarn') (an unknown method)", ValueError)


@test("q4", points=0.5)
def unchanged_pairs_for_a_32_wide_head(unchanged_pairs):
    cases = [(32, 10000.0, 2.0, "ntk", 0.1, [0, 1, 2]), (32, 10000.0, 2.0, "linear", 0.6, list(range(16))),
             (32, 10000.0, 2.0, "linear", 0.1, [])]
    got = yield [run(unchanged_pairs, *case[:5]) for case in cases]
    for (d, base, factor, m, tolerance, expected), out in zip(cases, got):
        label = f"unchanged_pairs({d}, {base}, {factor}, {m!r}, tolerance={tolerance})"
        found = out.ok(label)
        assert isinstance(found, list) and all(type(i) is int for i in found), (
            f"{label} must return a Python list of ints (tensor.tolist() makes one)"
        )
        assert found == expected, (
            f"{label} is {found}, expected {expected}: the pairs i with |theta_i' / theta_i - 1| < tolerance, in "
            f"increasing order, with your extended_frequencies"
        )


#: rope_partial_half of x = (1, 2, ..., 8) at position 1, rotary_dim 4, base 100: pairs (dims 0, 2) and (dims 1, 3)
#: turn by theta = 1 and 0.1 radians, dims 4 to 7 pass through
PARTIAL = torch.tensor([-1.984110648556, 1.590674663969, 2.462377902412, 4.179683494406, 5.0, 6.0, 7.0, 8.0],
                       dtype=torch.float64)
#: the same angles on adjacent pairs (dims 0, 1) and (2, 3): the interleaved layout
PARTIAL_INTERLEAVED = torch.tensor([-1.142639663748, 1.922075596544, 2.585678829247, 4.279516911053, 5.0, 6.0, 7.0,
                                    8.0], dtype=torch.float64)
#: the rotate-half layout with theta_i = base ** (-2i / head_dim): pair 1 turns by 100 ** (-2 / 8) = 0.316 radians
PARTIAL_HEAD_DIM = torch.tensor([-1.984110648556, 0.656896188882, 2.462377902412, 4.423628306835, 5.0, 6.0, 7.0,
                                 8.0], dtype=torch.float64)
#: rope_partial_half of (1, 1, ..., 1) at position 3000, rotary_dim = head_dim = 8, base 10000
PARTIAL_FAR = torch.tensor([-1.194872174169, 0.977659220622, 1.142283073980, -1.131112504660, -0.756492225603,
                            -1.021852459180, -0.833780174205, -0.848872488541], dtype=torch.float64)


RAMP = torch.tensor([[[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]]]], dtype=torch.float64)  # x = (1, 2, ..., 8)
RAMP32 = torch.tensor([[[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]]]])


def _partial_float32(rope_partial_half):
    x = RAMP32.clone()
    out = rope_partial_half(x, 4, offset=1, base=100.0)
    return {"out": out, "x_after": x}


@test("q5", points=1)
def partial_rope_turns_pairs_i_and_i_plus_half_of_the_rotary_dims(rope_partial_half):
    got = yield [run(rope_partial_half, RAMP.clone(), 4, offset=1, base=100.0),
                 run(_partial_float32, rope_partial_half)]
    label = "rope_partial_half(x = (1, 2, ..., 8), 4, offset=1, base=100.0)"
    out = got[0].tensor(f"{label} in float64", shape=(1, 1, 1, 8), dtype=torch.float64)[0, 0, 0]
    assert torch.equal(out[4:], PARTIAL[4:]), (
        f"{label}: dims 4 to 7 (from rotary_dim on) must pass through unchanged as (5, 6, 7, 8), got "
        f"{_rounded(out[4:])}: only the first rotary_dim dims rotate"
    )
    assert not torch.allclose(out, PARTIAL_INTERLEAVED, atol=1e-6), (
        f"{label} turned the adjacent dims (0, 1) and (2, 3): that is the interleaved layout; here pair i is dims i "
        f"and i + rotary_dim / 2 (the rotate-half layout of GPT-NeoX)"
    )
    assert not torch.allclose(out, PARTIAL_HEAD_DIM, atol=1e-6), (
        f"{label} turned pair 1 by 100 ** (-2 / 8) = 0.316 radians: with partial RoPE the frequencies are "
        f"theta_i = base ** (-2i / rotary_dim), over the rotated dims only (pair 1 turns by 0.1)"
    )
    assert torch.allclose(out, PARTIAL, atol=1e-6), (
        f"{label} must be {_rounded(PARTIAL)}, got {_rounded(out)}: pair i (dims i and i + 2) turns by "
        f"theta_i = 100 ** (-2i / 4) = 1 and 0.1 radians at position 1, as (x_i cos - x_(i+2) sin, "
        f"x_i sin + x_(i+2) cos)"
    )
    r = got[1].ok(f"{label} in float32")
    found = as_tensor(r["out"], label)
    assert found.shape == (1, 1, 1, 8) and found.dtype == torch.float32, (
        f"{label} must keep x's shape (1, 1, 1, 8) and dtype float32, got {tuple(found.shape)} {found.dtype}"
    )
    assert torch.equal(as_tensor(r["x_after"], "x"), RAMP32), (
        f"{label} changed x: write the result to a new tensor"
    )


@test("q5", points=0.5)
def partial_rope_angles_in_float64_and_bad_arguments(rope_partial_half):
    got = yield [
        run(rope_partial_half, torch.ones(1, 1, 1, 8, dtype=torch.float64), 8, offset=3000),
        run(rope_partial_half, torch.zeros(1, 2, 3, 8), 3),
        run(rope_partial_half, torch.zeros(1, 2, 3, 8), 10),
        run(rope_partial_half, torch.zeros(1, 2, 3, 8), 0),
        run(rope_partial_half, torch.zeros(2, 3, 8), 4),
    ]
    label = "rope_partial_half(x = ones, 8, offset=3000)"
    far = got[0].tensor(label, shape=(1, 1, 1, 8), dtype=torch.float64)[0, 0, 0]
    error = (far - PARTIAL_FAR).abs().max().item()
    assert error < 1e-2, (
        f"{label} (every dim rotates) is {_rounded(far)}, expected {_rounded(PARTIAL_FAR)}: pair i is dims i and "
        f"i + 4, turned by 3000 * 10000 ** (-2i / 8) radians (if the first check of question 5 fails, fix that first)"
    )
    assert error < 1e-9, (
        f"{label} (every dim rotates) is off by {error:.1e}: compute the positions and angles in float64, as float32 "
        f"rounds 3000 * theta_i by about 1e-4 radians"
    )
    got[1].raises("rope_partial_half(x of shape (1, 2, 3, 8), 3) (an odd rotary_dim)", ValueError)
    got[2].raises("rope_partial_half(x of shape (1, 2, 3, 8), 10) (rotary_dim above head_dim)", ValueError)
    got[3].raises("rope_partial_half(x of shape (1, 2, 3, 8), 0) (nothing to rotate)", ValueError)
    got[4].raises("rope_partial_half(x of shape (2, 3, 8), 4) (not 4-D: batch, heads, seq, head_dim)", ValueError)
