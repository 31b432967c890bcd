"""Public tests of exercise 05 (what `grader.check` runs). Format: course_embed/tools/grading/probe.py."""

import math

import torch

from course_embed.tools.grading.probe import as_tensor, run, test


def _unit_vectors():
    x = torch.zeros(1, 1, 3, 4)
    x[..., 0] = 1.0  # the unit vector e_0 at positions 0, 1 and 2
    return x


@test("q1", points=1)
def rope_turns_pair_0_by_the_position(rope):
    got = yield run(rope, _unit_vectors())
    out = got.tensor("rope(x)", shape=(1, 1, 3, 4), dtype=torch.float32)
    assert torch.allclose(out[0, 0, 0], torch.tensor([1.0, 0.0, 0.0, 0.0])), "position 0 is not rotated"
    expected = torch.tensor([math.cos(2.0), math.sin(2.0), 0.0, 0.0])
    assert torch.allclose(out[0, 0, 2], expected, atol=1e-6), "pair 0 of position 2 turns by 2 * theta_0 = 2 radians"


def _offset_probe(rope):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 10, 8, generator=gen, dtype=torch.float64)
    far = torch.zeros(1, 1, 1, 2, dtype=torch.float64)
    far[..., 0] = 1.0
    return {"whole": rope(x), "tail": rope(x[:, :, 7:].clone(), offset=7), "far": rope(far, offset=3000),
            "odd": _raised(rope, torch.zeros(1, 2, 3, 5))}


def _raised(fn, *args):
    try:
        fn(*args)
    except Exception as err:
        return type(err).__name__
    return ""


@test("q1", points=1)
def rope_uses_the_offset_in_float64_and_rejects_odd_width(rope):
    got = yield run(_offset_probe, rope)
    r = got.ok("rope with an offset")
    whole, tail = as_tensor(r["whole"], "rope(x)"), as_tensor(r["tail"], "rope(x[..., 7:, :], offset=7)")
    assert torch.allclose(tail, whole[:, :, 7:], atol=1e-9), \
        "rope(x[..., 7:, :], offset=7) must equal rope(x)[..., 7:, :]: the offset is the first token's position"
    far = as_tensor(r["far"], "rope(x, offset=3000)")[0, 0, 0]
    assert abs(far[0].item() - math.cos(3000.0)) < 1e-9 and abs(far[1].item() - math.sin(3000.0)) < 1e-9, \
        "at offset 3000 the angle is off: compute the angles in float64"
    assert r["odd"] == "ValueError", f"an odd head_dim must raise ValueError, got {r['odd'] or 'no error'}"


@test("q2", points=1)
def slopes_for_8_and_6_heads(alibi_slopes):
    got = yield [run(alibi_slopes, 8), run(alibi_slopes, 6), run(alibi_slopes, 0)]
    eight = got[0].tensor("alibi_slopes(8)", shape=(8,), dtype=torch.float32)
    assert torch.allclose(eight, torch.tensor([2.0 ** -k for k in range(1, 9)])), "8 heads: 1/2, 1/4, ..., 1/256"
    six = got[1].tensor("alibi_slopes(6)", shape=(6,), dtype=torch.float32)
    expected = [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8, 2.0 ** -1, 2.0 ** -3]
    assert torch.allclose(six, torch.tensor(expected)), \
        "6 heads: the 4 slopes for 4 heads, then the 1st and 3rd of the 8-head sequence (1/2, 1/8)"
    got[2].raises("alibi_slopes(0)", ValueError)


def _recent_weight(head, num_heads=8, seq_len=128, recent=16):
    """Closed form in float64 (the checks may run without course_embed)."""
    p = 2 ** math.floor(math.log2(num_heads))
    slopes = [2.0 ** (-8.0 * (i + 1) / p) for i in range(p)]
    slopes += [2.0 ** (-8.0 * (i + 1) / (2 * p)) for i in range(2 * p)][0::2][:num_heads - p]
    weights = torch.softmax(-slopes[head] * torch.arange(seq_len - 1, -1, -1, dtype=torch.float64), dim=0)
    return weights[-recent:].sum().item()


@test("q3", points=1)
def recent_weight_of_head_0(recent_weight):
    got = yield run(recent_weight, 0)
    value = got.number("recent_weight(0)")
    assert abs(value - _recent_weight(0)) <= 0.000051, \
        "recent_weight(0) is off (checked to the 4 decimals asked): which distances, which keys?"


METHODS = ("linear", "ntk")


def _plain_frequencies(head_dim, base):
    """RoPE's theta_i = base**(-2i/head_dim), (head_dim // 2,) float64 (the checks may run without course_embed)."""
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


@test("q4", points=1)
def extended_frequencies_give_plain_rope_at_factor_1_and_slow_down_as_asked(extended_frequencies):
    got = yield [run(extended_frequencies, 8, 10000.0, factor, m) for factor in (1.0, 4.0) for m in METHODS]
    plain = _plain_frequencies(8, 10000.0)
    labels = [f"extended_frequencies(8, 10000.0, {factor}, {m!r})" for factor in (1.0, 4.0) for m in METHODS]
    freqs = [out.tensor(label, shape=(4,), dtype=torch.float64) for label, out in zip(labels, got)]
    for label, found in zip(labels[:2], freqs[:2]):
        assert torch.allclose(found, plain, rtol=1e-12, atol=0), \
            f"{label} must be plain RoPE's frequencies base ** (-2i / head_dim), i = 0, 1, 2, 3, computed in float64"
    assert torch.allclose(freqs[2], plain / 4, rtol=1e-12, atol=0), \
        f"{labels[2]}: position interpolation divides every frequency by the factor"
    ntk = freqs[3]
    assert math.isclose(ntk[0].item(), 1.0, rel_tol=1e-12) and math.isclose(
        ntk[-1].item(), plain[-1].item() / 4, rel_tol=1e-12
    ), f"{labels[3]}: NTK-aware scaling keeps the fastest pair's frequency (1) and divides the slowest by the factor"


@test("q4", points=0.5)
def unchanged_pairs_for_a_narrow_head(unchanged_pairs):
    got = yield [run(unchanged_pairs, 8, 10000.0, 4.0, m) for m in METHODS]
    for m, out, expected in zip(METHODS, got, ([], [0])):
        label = f"unchanged_pairs(8, 10000.0, 4.0, {m!r})"
        found = out.ok(label)
        assert isinstance(found, list) and all(type(i) is int for i in found), \
            f"{label} must return a Python list of ints (tensor.tolist() makes one)"
        assert found == expected, \
            f"{label} must be {expected}: which pairs change by less than 10% of their plain frequency?"
