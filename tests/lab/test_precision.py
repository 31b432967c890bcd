"""Training in bfloat16: stochastic rounding, Kahan-compensated updates and the small measured run."""

import math

import numpy as np
import pytest
import torch

from course_embed.lab import optimization, precision

BF16_MAX = float(torch.finfo(torch.bfloat16).max)


def bf16_neighbours(x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The bfloat16 values just below and just above ``|x|`` (float64, from frexp, independent of bit tricks).

    bfloat16 has 8 significant bits: for ``|x|`` in ``[2**(e-1), 2**e)`` the spacing is ``2**(e-8)``; below the
    smallest normal (``2**-126``) it is the subnormal spacing ``2**-133``. Returns (lower, upper); for ``|x|``
    already representable both are ``|x|``.
    """
    a = np.abs(x.double().numpy())
    _, e = np.frexp(a)  # a = m * 2**e with m in [0.5, 1)
    spacing = np.ldexp(1.0, np.maximum(e, -125) - 8)
    lower = np.floor(a / spacing) * spacing
    upper = np.where(lower == a, a, lower + spacing)
    return lower, upper


def test_result_is_one_of_the_two_neighbours_and_both_occur(gen):
    scale = 2.0 ** torch.randint(-130, 100, (20_000,), generator=gen).float()  # normals and subnormals
    x = torch.randn(20_000, generator=gen) * scale
    lower, upper = bf16_neighbours(x)
    got = np.abs(precision.stochastic_round(x, generator=gen).double().numpy())
    assert np.all((got == lower) | (got == upper))
    inexact = lower != upper
    assert inexact.mean() > 0.99
    up = got[inexact] == upper[inexact]
    assert 0.3 < up.mean() < 0.7  # both neighbours are drawn (up with probability ~ 1/2 on average)
    signs = precision.stochastic_round(x, generator=gen).float().signbit().numpy()
    assert np.all(signs == np.signbit(x.numpy()))


def test_expectation_equals_the_input(gen):
    # values at known fractions of a spacing: 1 + f * 2**-7 (spacing 2**-7) and -3e-3 (spacing 2**-16)
    x = torch.tensor([1 + 0.1 * 2**-7, 1 + 0.5 * 2**-7, 1 + 0.97 * 2**-7, -3e-3, 12345.678])
    n = 20_000
    draws = precision.stochastic_round(x.expand(n, -1).contiguous(), generator=gen).double()  # (n, 5)
    lower, upper = bf16_neighbours(x)
    spacing = upper - lower
    p_up = (np.abs(x.double().numpy()) - lower) / spacing
    sigma = spacing * np.sqrt(p_up * (1 - p_up) / n)  # std of the mean of n two-point draws
    error = np.abs(draws.mean(0).numpy() - x.double().numpy())
    assert np.all(error < 5 * sigma), (error, sigma)
    # round-to-nearest is biased by far more than that on the first value (it always rounds down to 1)
    assert abs(x[0].bfloat16().double().item() - x[0].double().item()) > 20 * sigma[0]


def test_representable_values_and_special_values_stay_exact(gen):
    exact = torch.randn(10_000, generator=gen).bfloat16().float()
    special = torch.tensor([0.0, -0.0, math.inf, -math.inf, BF16_MAX, -BF16_MAX, 2.0**-133])
    x = torch.cat([exact, special])
    for _ in range(5):
        got = precision.stochastic_round(x, generator=gen)
        assert torch.equal(got.float(), x)
        assert torch.equal(got.float().signbit(), x.signbit())  # -0.0 stays -0.0
    # NaNs, including those whose payload lies only in the 16 bits that are cut (cutting them would give inf)
    low_payload = torch.tensor([0x7F800001, 0x7F80FFFF], dtype=torch.int32).view(torch.float32)
    nan = precision.stochastic_round(torch.cat([torch.tensor([math.nan, -math.nan]), low_payload]), generator=gen)
    assert nan.isnan().all()


def test_values_beyond_the_largest_bfloat16_round_to_it_or_to_infinity(gen):
    x = torch.full((4000,), 3.395e38)  # between bfloat16's max (3.3895e38) and float32's max
    got = precision.stochastic_round(x, generator=gen).float()
    assert set(got.unique().tolist()) == {BF16_MAX, math.inf}


def test_stochastic_round_is_reproducible_with_a_seeded_generator():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    a = precision.stochastic_round(x, generator=torch.Generator().manual_seed(7))
    b = precision.stochastic_round(x, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b) and a.dtype == torch.bfloat16 and a.shape == x.shape


def test_stochastic_round_rejects_bad_input():
    with pytest.raises(TypeError, match=r"x must be a float32 tensor, got torch.float64.*x.float\(\)"):
        precision.stochastic_round(torch.zeros(3, dtype=torch.float64))
    with pytest.raises(TypeError, match="got list"):
        precision.stochastic_round([1.0, 2.0])
    with pytest.raises(ValueError, match=r"dtype must be torch.bfloat16 .*got torch.float16"):
        precision.stochastic_round(torch.zeros(3), dtype=torch.float16)


def test_kahan_accumulates_small_updates_that_round_to_nearest_loses(gen):
    n = 5000
    updates = 0.5e-3 + 1e-3 * torch.rand(n, 8, generator=gen)  # each below half a spacing at 1 (2**-8)
    exact = 1 + updates.double().sum(0)  # (8,), about 6
    weight = torch.ones(8, dtype=torch.bfloat16)
    compensation = torch.zeros_like(weight)
    nearest = torch.ones(8, dtype=torch.bfloat16)
    for u in updates:
        precision.kahan_add_(weight, compensation, u)
        nearest = (nearest.float() + u).bfloat16()
    spacing = 2.0 ** (math.floor(math.log2(exact.max().item())) - 7)  # bfloat16 spacing at the sum
    # the stored weight is within half a spacing (plus the compensation's own drift) of the exact sum ...
    assert (weight.double() - exact).abs().max() <= spacing
    # ... and weight - compensation tracks it more closely: each step stores the compensation (at most half a
    # spacing) with relative error 2**-8, a random walk of n steps
    drift = math.sqrt(n) * 2**-8 * spacing
    assert (weight.double() - compensation.double() - exact).abs().max() <= drift
    assert torch.equal(nearest, torch.ones(8, dtype=torch.bfloat16))  # every update was rounded away


def test_kahan_add_checks_shapes():
    w = torch.zeros(3, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"same shape.*\(3,\), \(2,\) and \(3,\).*zeros_like"):
        precision.kahan_add_(w, torch.zeros(2, dtype=torch.bfloat16), torch.zeros(3))


def test_float32_run_is_torch_adam():
    run = precision.train_table("float32", v=8, d=16, steps=50, lr=1e-3, seed=3)
    w = run["start"].clone().requires_grad_()
    opt = torch.optim.Adam([w], lr=1e-3)
    for _ in range(50):
        opt.zero_grad()
        (w - run["target"]).square().mean().backward()
        opt.step()
    torch.testing.assert_close(run["weight"], w.detach(), rtol=1e-5, atol=1e-7)


def test_round_to_nearest_freezes_the_predicted_weights_and_the_remedies_do_not():
    runs = precision.compare_variants(v=16, d=256, steps=300, lr=1e-4)
    start = precision.train_table("float32", v=16, d=256, steps=0)["start"]
    # Adam's first steps are about lr: round-to-nearest loses them where lr is below half a spacing, which
    # lost_update_fraction predicts (weights that never move); the others all move
    predicted = optimization.lost_update_fraction(start, 1e-4, torch.bfloat16)
    assert abs(runs["bf16 round-to-nearest"]["unchanged"] - predicted) < 0.05
    for name in ("bf16 stochastic", "bf16 Kahan", "bf16 + fp32 master"):
        assert runs[name]["unchanged"] < 0.02
        assert runs[name]["loss"] < 1.05 * runs["float32"]["loss"]
    # Kahan tracks the master-weight run (both hold the exact sum up to bfloat16 storage); stochastic rounding
    # is right on average but each weight carries up to one spacing of noise
    assert runs["bf16 Kahan"]["distance"] < 0.02 and runs["bf16 + fp32 master"]["distance"] < 0.02
    assert runs["bf16 stochastic"]["distance"] < 0.1
    assert runs["bf16 round-to-nearest"]["distance"] > 0.5
    assert runs["bf16 round-to-nearest"]["loss"] > 5 * runs["float32"]["loss"]
    assert runs["float32"]["distance"] == 0.0 and len(runs["float32"]["losses"]) == 301


def test_train_table_rejects_an_unknown_variant():
    with pytest.raises(ValueError, match="variant must be one of"):
        precision.train_table("fp8")
