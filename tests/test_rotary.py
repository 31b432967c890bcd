"""RoPE against independent formulations: float64 complex multiplication, the rotate_half formula, and the
published scaling formulas (Hugging Face ``modeling_rope_utils``), re-derived here in plain Python."""

import copy
import math

import pytest
import torch

from course_embed.rotary import (
    LAYOUTS,
    RotaryEmbedding,
    dynamic_ntk_base,
    layout_permutation,
    ntk_base,
    rope_frequencies,
    rope_parameters,
    yarn_attention_factor,
    yarn_frequencies,
    yarn_ramp,
)

# float32 cos/sin cache: results agree with float64 references to float32 rounding of the tables
TABLE_TOL = dict(rtol=1e-5, atol=1e-5)


def theta(head_dim, base=10000.0):
    return torch.tensor([base ** (-2 * i / head_dim) for i in range(head_dim // 2)], dtype=torch.float64)


def reference_interleaved(x, positions, freqs):
    """(x_{2i} + i x_{2i+1}) * exp(i m theta_i) in complex128; x (..., s, h_d), positions (s,), freqs (p,)."""
    z = torch.complex(x[..., 0::2].double(), x[..., 1::2].double())
    turned = z * torch.exp(1j * positions.double()[:, None] * freqs[None, :])
    return torch.stack((turned.real, turned.imag), dim=-1).flatten(-2)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def reference_half(x, positions, freqs):
    """The textbook rotate_half formula in float64: x cos + rotate_half(x) sin with (s, h_d) tables."""
    angles = positions.double()[:, None] * freqs[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    x = x.double()
    return x * angles.cos() + rotate_half(x) * angles.sin()


def test_frequencies_closed_form():
    torch.testing.assert_close(rope_frequencies(8, 100.0), theta(8, 100.0), rtol=1e-15, atol=0)
    assert rope_frequencies(64)[0].item() == 1.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_interleaved_is_complex_multiplication(device, gen, dtype):
    x = torch.randn(2, 3, 40, 16, generator=gen, dtype=torch.float64)
    rope = RotaryEmbedding(16, layout="interleaved")  # also grows the cache
    out = rope.rotate(x.to(device=device, dtype=dtype), offset=5)
    assert out.dtype == dtype and out.device.type == device.type and out.shape == x.shape
    expected = reference_interleaved(x, torch.arange(5, 45), theta(16))
    torch.testing.assert_close(out.double().cpu(), expected, **TABLE_TOL)


def test_half_is_the_rotate_half_formula(device, gen):
    x = torch.randn(2, 3, 40, 16, generator=gen, dtype=torch.float64)
    out = RotaryEmbedding(16, layout="half").rotate(x.to(device), offset=7)
    torch.testing.assert_close(out.cpu(), reference_half(x, torch.arange(7, 47), theta(16)), **TABLE_TOL)


def test_layouts_are_one_rotation_under_a_permutation(device, gen):
    x = torch.randn(2, 4, 30, 32, generator=gen).to(device)
    perm = layout_permutation(32).to(device)
    assert sorted(perm.tolist()) == list(range(32)) and perm[:4].tolist() == [0, 16, 1, 17]
    half = RotaryEmbedding(32, layout="half").rotate(x, offset=3)
    interleaved = RotaryEmbedding(32, layout="interleaved").rotate(x[..., perm], offset=3)
    torch.testing.assert_close(half[..., perm], interleaved, rtol=1e-5, atol=1e-5)


def test_permuting_projection_rows_converts_a_checkpoint(gen):
    """Scores of a half-layout model equal those of the interleaved model with W_q, W_k rows permuted."""
    d_model, head_dim = 16, 8
    wq, wk = torch.randn(head_dim, d_model, generator=gen), torch.randn(head_dim, d_model, generator=gen)
    h = torch.randn(1, 1, 12, d_model, generator=gen)
    perm = layout_permutation(head_dim)
    half, inter = RotaryEmbedding(head_dim, layout="half"), RotaryEmbedding(head_dim, layout="interleaved")
    q_h, k_h = half(h @ wq.T, h @ wk.T)
    q_i, k_i = inter(h @ wq[perm].T, h @ wk[perm].T)
    torch.testing.assert_close(q_h @ k_h.transpose(-1, -2), q_i @ k_i.transpose(-1, -2), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rotation_preserves_norms(device, gen, layout):
    x = torch.randn(3, 2, 50, 24, generator=gen, dtype=torch.float64).to(device)
    out = RotaryEmbedding(24, layout=layout).rotate(x, offset=1000)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), rtol=1e-6, atol=0)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_scores_depend_only_on_the_offset(gen, layout):
    rope = RotaryEmbedding(32, layout=layout)
    q, k = (
        torch.randn(1, 1, 1, 32, generator=gen, dtype=torch.float64),
        torch.randn(1, 1, 1, 32, generator=gen, dtype=torch.float64),
    )

    def score(m, n):
        return (rope.rotate(q, offset=m) * rope.rotate(k, offset=n)).sum().item()

    for m, n in [(5, 2), (2, 5), (40, 40), (100, 3)]:
        for shift in (1, 17, 900):
            assert score(m + shift, n + shift) == pytest.approx(score(m, n), rel=1e-5, abs=1e-5)
    assert score(0, 0) == pytest.approx((q * k).sum().item(), rel=1e-12)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_offset_equals_rotating_the_later_positions(device, gen, layout):
    rope = RotaryEmbedding(16, layout=layout)
    x = torch.randn(2, 3, 20, 16, generator=gen).to(device)
    padded = torch.cat((torch.zeros(2, 3, 9, 16, device=device), x), dim=2)
    torch.testing.assert_close(rope.rotate(x, offset=9), rope.rotate(padded)[:, :, 9:], rtol=0, atol=1e-6)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs_use_float32_angles(device, gen, layout, dtype):
    x = torch.randn(1, 2, 8, 16, generator=gen, dtype=torch.float64)
    out = RotaryEmbedding(16, layout=layout).rotate(x.to(device=device, dtype=dtype), offset=1000)
    assert out.dtype == dtype
    reference = (reference_interleaved if layout == "interleaved" else reference_half)(
        x, torch.arange(1000, 1008), theta(16)
    )
    # angles in bfloat16 would put positions 1000..1007 on 2 values and miss by O(1); cast cos/sin only lose ~1e-2
    torch.testing.assert_close(out.double().cpu(), reference, rtol=0, atol=0.1)


def test_interleaved_half_precision_rounds_once(device, gen):
    """The interleaved layout rotates in float32 and rounds once (Meta's LLaMA code): within one rounding to bfloat16
    of the exact rotation of the bfloat16 input (a relative 2**-8), plus float32 round-off; bfloat16 products miss
    by more."""
    x = torch.randn(2, 3, 64, 32, generator=gen).to(device=device, dtype=torch.bfloat16)
    out = RotaryEmbedding(32).rotate(x, offset=1000)
    exact = reference_interleaved(x.double().cpu(), torch.arange(1000, 1064), theta(32))
    error = (out.double().cpu() - exact).abs()
    assert (error <= exact.abs() * 2**-8 + 1e-6).all(), error.max()


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_gradient_is_the_inverse_rotation(gen, layout):
    rope = RotaryEmbedding(
        8, layout=layout, rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
    )
    x = torch.randn(1, 2, 5, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: rope.rotate(t, offset=3), (x,))


def test_non_contiguous_inputs(gen):
    """(b, s, h, h_d) projections transposed to (b, h, s, h_d) are views, not copies."""
    x = torch.randn(2, 10, 3, 8, generator=gen).transpose(1, 2)
    for layout in ("interleaved", "half"):
        rope = RotaryEmbedding(8, layout=layout)
        torch.testing.assert_close(rope.rotate(x), rope.rotate(x.contiguous()), rtol=0, atol=1e-6)


def test_forward_rotates_q_and_k_with_different_head_counts(gen):
    rope = RotaryEmbedding(8)
    q, k = torch.randn(2, 4, 6, 8, generator=gen), torch.randn(2, 1, 6, 8, generator=gen)
    q_rot, k_rot = rope(q, k, offset=2)
    torch.testing.assert_close(q_rot, rope.rotate(q, 2), rtol=0, atol=0)
    torch.testing.assert_close(k_rot, rope.rotate(k, 2), rtol=0, atol=0)


def test_cos_sin_are_float64_angles_rounded_once():
    rope = RotaryEmbedding(8)
    cos32, sin32 = rope.cos_sin(torch.arange(3)[None])
    assert cos32.dtype == torch.float32 and cos32.shape == (1, 1, 3, 4)
    angles = torch.arange(3, dtype=torch.float64)[:, None] * theta(8)
    assert torch.equal(cos32[0, 0], angles.cos().float()) and torch.equal(sin32[0, 0], angles.sin().float())
    cos16, _ = rope.cos_sin(torch.arange(100, 110)[None], dtype=torch.float16)
    angles = torch.arange(100, 110, dtype=torch.float64)[:, None] * theta(8)
    assert torch.equal(cos16[0, 0], angles.cos().float().half())


def test_positions_far_out_cost_the_same_work_as_near_ones():
    """No tables: a decoding step at position 30000 computes its own (1, p) angles, like one at position 3."""
    rope = RotaryEmbedding(8, layout="half")
    step = torch.randn(1, 2, 1, 8, dtype=torch.float64)
    for position in (3, 30_000):
        out = rope.rotate(step, offset=position)
        torch.testing.assert_close(out, reference_half(step, torch.tensor([position]), theta(8)), rtol=0, atol=1e-12)
    assert [name for name, _ in rope.named_buffers()] == ["inv_freq"]


def test_float64_input_is_rotated_with_float64_tables(gen):
    """cos of the slowest pair of a 64-wide head at position 1 is 0.9999999911086029, not 1.0."""
    rope = RotaryEmbedding(64)
    cos, sin = (t[0, 0] for t in rope.cos_sin(torch.arange(3)[None], dtype=torch.float64))
    angles = torch.arange(3, dtype=torch.float64)[:, None] * theta(64)
    torch.testing.assert_close(cos, angles.cos(), rtol=0, atol=1e-15)
    torch.testing.assert_close(sin, angles.sin(), rtol=0, atol=1e-15)
    assert cos[1, -1].item() == pytest.approx(0.9999999911086029, abs=1e-16)  # float32 gives 1.0
    for layout in LAYOUTS:
        x = torch.randn(2, 2, 300, 64, generator=gen, dtype=torch.float64)
        out = RotaryEmbedding(64, layout=layout).rotate(x, offset=4000)
        reference = (reference_interleaved if layout == "interleaved" else reference_half)(
            x, torch.arange(4000, 4300), theta(64)
        )
        torch.testing.assert_close(out, reference, rtol=0, atol=1e-12)


def test_float32_results_are_float64_angles_rounded_once(gen):
    x = torch.randn(1, 2, 50, 16, generator=gen)
    fresh = RotaryEmbedding(16).rotate(x, offset=3)
    angles = torch.arange(3, 53, dtype=torch.float64)[:, None] * theta(16)  # float64 angles rounded once
    expected = torch.view_as_real(
        torch.view_as_complex(x.unflatten(-1, (-1, 2))) * torch.complex(angles.cos().float(), angles.sin().float())
    ).flatten(-2)
    torch.testing.assert_close(fresh, expected, rtol=0, atol=4e-7)  # one float32 rounding of two products


# --- context extension --------------------------------------------------------------------------------------


def test_linear_interpolation_divides_positions_by_the_factor(gen):
    x = torch.randn(1, 1, 64, 16, generator=gen, dtype=torch.float64)
    rope = RotaryEmbedding(16, rope_scaling={"rope_type": "linear", "factor": 4.0})
    expected = reference_interleaved(x, torch.arange(64) / 4.0, theta(16))
    torch.testing.assert_close(rope.rotate(x), expected, **TABLE_TOL)


def test_ntk_base_formula_and_its_extremes():
    hd, base, factor = 64, 10000.0, 8.0
    assert ntk_base(base, hd, factor) == pytest.approx(base * factor ** (64 / 62), rel=1e-14)
    freqs, attention = rope_parameters(hd, base, {"rope_type": "ntk", "factor": factor})
    assert attention == 1.0
    assert freqs[0].item() == 1.0  # the fastest pair keeps its frequency (extrapolates)
    assert freqs[-1].item() == pytest.approx(theta(hd, base)[-1].item() / factor, rel=1e-12)  # the slowest interpolates


def hf_dynamic_base(base, dim, factor, seq_len, max_pos):
    seq_len = seq_len if seq_len > max_pos else max_pos
    return base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))


@pytest.mark.parametrize("seq_len", [10, 128, 129, 300, 1024])
def test_dynamic_ntk_base(seq_len):
    expected = hf_dynamic_base(10000.0, 32, 2.0, seq_len, 128)
    assert dynamic_ntk_base(10000.0, 32, 2.0, seq_len, 128) == pytest.approx(expected, rel=1e-14)
    if seq_len <= 128:
        assert expected == 10000.0


def test_dynamic_module_is_plain_up_to_the_original_length_then_grows(gen):
    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 32}
    rope = RotaryEmbedding(16, rope_scaling=scaling)
    x = torch.randn(1, 1, 32, 16, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(rope.rotate(x), reference_interleaved(x, torch.arange(32), theta(16)), **TABLE_TOL)
    long = torch.randn(1, 1, 100, 16, generator=gen, dtype=torch.float64)
    grown = theta(16, hf_dynamic_base(10000.0, 16, 2.0, 100, 32))
    torch.testing.assert_close(rope.rotate(long), reference_interleaved(long, torch.arange(100), grown), **TABLE_TOL)
    # decoding one token at position 100 uses the base for 101 tokens
    step = long[:, :, :1]
    torch.testing.assert_close(
        rope.rotate(step, offset=100),
        reference_interleaved(step, torch.tensor([100]), theta(16, hf_dynamic_base(10000.0, 16, 2.0, 101, 32))),
        **TABLE_TOL,
    )
    torch.testing.assert_close(rope.rotate(x), reference_interleaved(x, torch.arange(32), theta(16)), **TABLE_TOL)


def test_dynamic_decoding_steps_use_the_base_of_their_length():
    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64}
    rope = RotaryEmbedding(16, rope_scaling=scaling)
    step = torch.randn(1, 1, 1, 16, dtype=torch.float64)
    for position in (100, 10_000, 30_000):
        out = rope.rotate(step, offset=position)
        expected = reference_interleaved(
            step, torch.tensor([position]), theta(16, hf_dynamic_base(10000.0, 16, 2.0, position + 1, 64))
        )
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_llama3_keeps_short_wavelengths_and_interpolates_long_ones():
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "original_max_position_embeddings": 8192,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    }
    freqs, attention = rope_parameters(128, 500000.0, scaling)
    plain = theta(128, 500000.0)
    wavelength = 2 * math.pi / plain
    assert attention == 1.0
    short, long = wavelength < 8192 / 4, wavelength > 8192
    assert short.sum() > 0 and long.sum() > 0
    torch.testing.assert_close(freqs[short], plain[short], rtol=1e-15, atol=0)
    torch.testing.assert_close(freqs[long], plain[long] / 8, rtol=1e-15, atol=0)
    middle = ~short & ~long
    ratio = freqs[middle] / plain[middle]
    assert ((ratio > 1 / 8) & (ratio < 1)).all() and (ratio.diff() < 0).all()  # blended, slower for longer waves


def test_longrope_switches_factor_sets_at_the_original_length(gen):
    short, long = [1.0, 1.5, 2.0, 3.0], [1.0, 2.0, 4.0, 8.0]
    scaling = {
        "rope_type": "longrope",
        "factor": 4.0,
        "original_max_position_embeddings": 32,
        "short_factor": short,
        "long_factor": long,
    }
    attention = math.sqrt(1 + math.log(4.0) / math.log(32))
    freqs, got = rope_parameters(8, 10000.0, scaling, seq_len=32)
    torch.testing.assert_close(freqs, theta(8) / torch.tensor(short, dtype=torch.float64), rtol=1e-15, atol=0)
    assert got == pytest.approx(attention, rel=1e-15)
    rope = RotaryEmbedding(8, rope_scaling=scaling)
    x = torch.randn(1, 1, 40, 8, generator=gen, dtype=torch.float64)
    for length, factors in ((32, short), (40, long)):
        expected = attention * reference_interleaved(
            x[:, :, :length], torch.arange(length), theta(8) / torch.tensor(factors, dtype=torch.float64)
        )
        torch.testing.assert_close(rope.rotate(x[:, :, :length]), expected, rtol=0, atol=1e-12)


def hf_yarn(dim, base, factor, max_pos, beta_fast=32, beta_slow=1, truncate=True):
    """Plain-Python YaRN frequencies, after transformers' _compute_yarn_parameters."""

    def correction_dim(rotations):
        return (dim * math.log(max_pos / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    out = []
    for i in range(dim // 2):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        extrapolation = 1 - ramp
        pos_freq = base ** (2 * i / dim)
        out.append((1 / (factor * pos_freq)) * (1 - extrapolation) + (1 / pos_freq) * extrapolation)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize(
    "dim, base, factor, max_pos, beta_fast, beta_slow, truncate",
    [
        (128, 10000.0, 4.0, 4096, 32, 1, True),  # LLaMA-2-like
        (64, 500000.0, 8.0, 8192, 32, 1, True),
        (16, 10000.0, 4.0, 64, 32, 1, True),  # the chapter's tiny model
        (64, 10000.0, 16.0, 2048, 16, 2, False),
    ],
)
def test_yarn_matches_the_reference_formula(dim, base, factor, max_pos, beta_fast, beta_slow, truncate):
    expected = hf_yarn(dim, base, factor, max_pos, beta_fast, beta_slow, truncate)
    got = yarn_frequencies(dim, base, factor, max_pos, beta_fast, beta_slow, truncate)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)
    scaling = {
        "rope_type": "yarn",
        "factor": factor,
        "original_max_position_embeddings": max_pos,
        "beta_fast": beta_fast,
        "beta_slow": beta_slow,
        "truncate": truncate,
    }
    freqs, attention = rope_parameters(dim, base, scaling)
    torch.testing.assert_close(freqs, expected, rtol=1e-12, atol=0)
    assert attention == pytest.approx(0.1 * math.log(factor) + 1.0, rel=1e-14)


def test_yarn_in_a_16_wide_head_changes_seven_of_eight_pairs():
    """At L0 = 64 no pair turns beta_fast = 32 times, so only the fastest pair keeps its frequency."""
    ratio = yarn_frequencies(16, 10000.0, 4.0, 64) / theta(16)
    torch.testing.assert_close(
        ratio, torch.tensor([1, 0.75, 0.5, 0.25, 0.25, 0.25, 0.25, 0.25], dtype=torch.float64), rtol=1e-14, atol=0
    )
    assert yarn_attention_factor(4.0) ** 2 == pytest.approx(1.2965, abs=1e-4)  # every logit times 1.30


def test_yarn_keeps_fast_pairs_and_interpolates_slow_ones():
    dim, base, factor, max_pos = 128, 10000.0, 8.0, 4096
    rotations = max_pos * theta(dim, base) / (2 * math.pi)
    ramp = yarn_ramp(dim, base, max_pos)
    freqs = yarn_frequencies(dim, base, factor, max_pos)
    assert torch.all(ramp[rotations > 32] == 0) and torch.all(ramp[rotations < 1] == 1)
    assert torch.all(ramp.diff() >= 0)
    torch.testing.assert_close(freqs[rotations > 32], theta(dim, base)[rotations > 32], rtol=1e-15, atol=0)
    torch.testing.assert_close(freqs[rotations < 1], theta(dim, base)[rotations < 1] / factor, rtol=1e-14, atol=0)


def test_yarn_attention_factor_scales_cos_and_sin(gen):
    scaling = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 256}
    rope = RotaryEmbedding(32, rope_scaling=scaling)
    assert rope.attention_factor == pytest.approx(0.1 * math.log(8) + 1, rel=1e-14)
    assert yarn_attention_factor(1.0) == 1.0
    x = torch.randn(1, 1, 10, 32, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(rope.rotate(x).norm(dim=-1), rope.attention_factor * x.norm(dim=-1), rtol=1e-6, atol=0)
    cos, sin = rope.cos_sin(torch.arange(10)[None])
    torch.testing.assert_close(
        cos.double() ** 2 + sin.double() ** 2,
        torch.full((1, 1, 10, 16), rope.attention_factor**2, dtype=torch.float64),
        rtol=1e-6,
        atol=0,
    )
    custom = RotaryEmbedding(32, rope_scaling={**scaling, "attention_factor": 1.0})
    assert custom.attention_factor == 1.0


@pytest.mark.parametrize(
    "scaling",
    [
        {"rope_type": "linear", "factor": 1.0},
        {"rope_type": "ntk", "factor": 1.0},
        {"rope_type": "yarn", "factor": 1.0, "original_max_position_embeddings": 64},
        {"type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 512},  # within the original length
    ],
)
def test_factor_one_is_plain_rope(gen, scaling):
    x = torch.randn(2, 2, 100, 16, generator=gen)
    plain = RotaryEmbedding(16).rotate(x)
    torch.testing.assert_close(RotaryEmbedding(16, rope_scaling=scaling).rotate(x), plain, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(head_dim=7), "head_dim must be a positive even integer"),
        (dict(head_dim=8, base=1.0), "base .rope_theta. must be > 1"),
        (dict(head_dim=8, layout="rotate_half"), "layout must be one of"),
        (dict(head_dim=8, rope_scaling={"rope_type": "proportinal", "factor": 2.0}), "rope_type'] must be one of"),
        (
            dict(head_dim=8, rope_scaling={"rope_type": "yarn", "factor": 2.0}),
            r"missing \['original_max_position_embeddings'\]",
        ),
        (
            dict(head_dim=8, rope_scaling={"rope_type": "linear", "factor": 2.0, "beta_fast": 3}),
            r"unknown \['beta_fast'\]",
        ),
        (dict(head_dim=8, rope_scaling={"rope_type": "linear", "factor": 0.5}), "factor'] must be >= 1"),
        (
            dict(
                head_dim=8, rope_scaling={"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 0}
            ),
            "must be a positive integer",
        ),
        (dict(head_dim=2, rope_scaling={"rope_type": "ntk", "factor": 2.0}), "head_dim > 2"),
    ],
)
def test_bad_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RotaryEmbedding(**kwargs)


def test_bad_inputs():
    rope = RotaryEmbedding(8)
    with pytest.raises(TypeError, match="floating-point"):
        rope.rotate(torch.zeros(1, 1, 4, 8, dtype=torch.long))
    with pytest.raises(ValueError, match=r"x.transpose\(1, 2\)"):
        rope.rotate(torch.zeros(1, 4, 8))
    with pytest.raises(ValueError, match="head_dim=8"):
        rope.rotate(torch.zeros(1, 1, 4, 6))
    with pytest.raises(ValueError, match="offset must be >= 0"):
        rope.rotate(torch.zeros(1, 1, 4, 8), offset=-1)
    with pytest.raises(ValueError, match="same positions"):
        rope(torch.zeros(1, 1, 4, 8), torch.zeros(1, 1, 5, 8))


def test_longrope_decoding_past_the_original_length_uses_the_long_factors(gen):
    pairs = 4
    scaling = {
        "rope_type": "longrope",
        "factor": 4.0,
        "original_max_position_embeddings": 64,
        "short_factor": [1.0] * pairs,
        "long_factor": [2.0] * pairs,
    }
    rope = RotaryEmbedding(8, rope_scaling=scaling, layout="half")
    rope.rotate(torch.randn(1, 1, 32, 8, generator=gen))
    step = torch.randn(1, 1, 1, 8, generator=gen, dtype=torch.float64)
    out = rope.rotate(step, offset=5000)  # one step with the long factors
    long_theta = theta(8) / torch.tensor([2.0] * pairs, dtype=torch.float64)
    attention = math.sqrt(1 + math.log(4.0) / math.log(64))
    torch.testing.assert_close(out, attention * reference_half(step, torch.tensor([5000]), long_theta))


# --- the PyTorch toolchain ---------------------------------------------------------------------------------------

DYNAMIC = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("scaling", [None, DYNAMIC])
def test_compiles_in_both_layouts_to_one_graph(gen, layout, scaling):
    rope = RotaryEmbedding(16, layout=layout, rope_scaling=scaling)
    q, k = torch.randn(2, 4, 12, 16, generator=gen), torch.randn(2, 2, 12, 16, generator=gen)
    compiled = torch.compile(rope, fullgraph=True, backend="eager")
    for got, expected in zip(compiled(q, k, offset=3), rope(q, k, offset=3), strict=False):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    ids = torch.tensor([[0, 0, 1, 2] + list(range(3, 11)), list(range(12))])
    torch.testing.assert_close(compiled(q, k, position_ids=ids)[0], rope(q, k, position_ids=ids)[0], rtol=0, atol=0)


def test_the_labs_rope_model_compiles(gen):
    from course_embed.lab.decoder import TinyLM

    torch.manual_seed(0)
    model = TinyLM(32, 2, 2, "rope", max_len=16).eval()
    ids = torch.randint(0, 20, (2, 10), generator=gen)
    torch.testing.assert_close(torch.compile(model, backend="eager")(ids), model(ids), rtol=0, atol=0)


def test_deferred_initialisation_on_the_meta_device(gen):
    scaling = {"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": 8,
               "short_factor": [1.0, 1.5, 2.0, 3.0], "long_factor": [1.0, 2.0, 4.0, 8.0]}  # fmt: skip
    with torch.device("meta"):
        lazy = RotaryEmbedding(8, rope_scaling=scaling)
    assert lazy.inv_freq.is_meta
    lazy.to_empty(device="cpu")
    lazy.reset_parameters()
    x = torch.randn(1, 2, 12, 8, generator=gen, dtype=torch.float64)
    assert torch.equal(lazy.rotate(x), RotaryEmbedding(8, rope_scaling=scaling).rotate(x))


def test_dtype_moves_keep_float64_frequencies_and_copies_are_independent(gen):
    rope = RotaryEmbedding(64, rope_scaling=DYNAMIC, dynamic_rule="transformers")
    for move in (torch.nn.Module.float, torch.nn.Module.half, torch.nn.Module.double):
        move(rope)
        torch.testing.assert_close(rope.inv_freq, theta(64), rtol=1e-15, atol=0)  # never a rounded copy
    rope.rotate(torch.randn(1, 1, 20, 64, generator=gen))  # the transformers rule remembers length 20
    twin = copy.deepcopy(rope)
    assert twin.longest.item() == 20 and twin.longest.data_ptr() != rope.longest.data_ptr()
    assert rope.state_dict() == {}  # everything is computed from the arguments
    x = torch.randn(1, 1, 10, 64, generator=gen, dtype=torch.float64)
    assert torch.equal(twin.rotate(x), rope.rotate(x))


def test_construction_arguments_are_read_only():
    rope = RotaryEmbedding(8)
    for name, value in (("base", 500000.0), ("rope_scaling", {"rope_type": "linear", "factor": 4.0})):
        with pytest.raises(
            AttributeError, match=f"RotaryEmbedding.{name} is fixed at construction.*new RotaryEmbedding"
        ):
            setattr(rope, name, value)
    with pytest.raises(ValueError, match=r"base=10000.0 and rope_scaling\['rope_theta'\]=500000.0 disagree"):
        RotaryEmbedding(8, base=10000.0, rope_scaling={"rope_theta": 500000.0})
    assert RotaryEmbedding(8, rope_scaling={"rope_theta": 500000.0}).base == 500000.0
