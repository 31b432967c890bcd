import math

import pytest
import torch

from course_embed import (
    SinusoidalPositionalEncoding,
    inverse_frequencies,
    offset_rotation,
    sinusoidal_table,
)


def closed_form(length, d, base=10000.0, offset=0):
    """Vaswani et al. section 3.5, element by element in Python floats (float64)."""
    rows = []
    for p in range(offset, offset + length):
        row = []
        for j in range(d):
            angle = p / base ** (2 * (j // 2) / d)
            row.append(math.sin(angle) if j % 2 == 0 else math.cos(angle))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


@pytest.mark.parametrize("length, d, base, offset", [(50, 16, 10000.0, 0), (7, 6, 100.0, 3), (20, 64, 10000.0, 12345)])
def test_table_matches_closed_form(length, d, base, offset):
    table = sinusoidal_table(length, d, base, offset=offset, dtype=torch.float64)
    # float64 angle rounding grows with the position: about eps * p
    atol = 1e-13 + 4 * torch.finfo(torch.float64).eps * (offset + length)
    torch.testing.assert_close(table, closed_form(length, d, base, offset), rtol=0, atol=atol)


def test_float32_table_error_at_large_positions():
    # angles are formed in float64, so even position 1e6 is accurate to float32 rounding
    table = sinusoidal_table(4, 32, offset=1_000_000)
    exact = closed_form(4, 32, offset=1_000_000)
    assert (table.double() - exact).abs().max() < 1e-6


def test_frequencies_are_a_geometric_progression():
    w = inverse_frequencies(512)
    assert w[0] == 1.0
    ratios = w[1:] / w[:-1]
    torch.testing.assert_close(ratios, torch.full_like(ratios, 10000 ** (-2 / 512)), rtol=1e-12, atol=0)
    # wavelengths from 2*pi to nearly 10000 * 2*pi
    assert math.isclose(2 * math.pi / w[-1].item(), 2 * math.pi * 10000 ** (510 / 512), rel_tol=1e-12)


@pytest.mark.parametrize("d", [8, 64, 512])
def test_offset_is_a_rotation_independent_of_position(d, gen):
    k = 37
    M = offset_rotation(k, d)
    torch.testing.assert_close(M @ M.T, torch.eye(d, dtype=torch.float64), rtol=0, atol=1e-12)
    p = torch.randint(0, 5000, (20,), generator=gen)
    for pos in p.tolist():
        pe_p = sinusoidal_table(1, d, offset=pos, dtype=torch.float64)[0]
        pe_pk = sinusoidal_table(1, d, offset=pos + k, dtype=torch.float64)[0]
        assert (M @ pe_p - pe_pk).abs().max() < 1e-10
        pe32 = sinusoidal_table(1, d, offset=pos)[0]
        pe32_k = sinusoidal_table(1, d, offset=pos + k)[0]
        assert (offset_rotation(k, d, dtype=torch.float32) @ pe32 - pe32_k).abs().max() < 1e-3


def test_dot_product_depends_only_on_distance(gen):
    d = 128
    table = sinusoidal_table(3000, d, dtype=torch.float64)
    for _ in range(20):
        p, q, shift = torch.randint(0, 1000, (3,), generator=gen).tolist()
        a = table[p] @ table[q]
        b = table[p + shift] @ table[q + shift]
        c = table[q] @ table[p]
        expected = sum(math.cos(w * (p - q)) for w in inverse_frequencies(d).tolist())
        assert abs(a - b) < 1e-9 and abs(a - c) < 1e-12 and abs(a - expected) < 1e-9


def test_row_norm_is_sqrt_half_d():
    table = sinusoidal_table(100, 512, dtype=torch.float64)
    torch.testing.assert_close(table.norm(dim=1), torch.full((100,), 16.0, dtype=torch.float64))


def test_module_adds_positions_with_offset(device, gen):
    pe = SinusoidalPositionalEncoding(16, max_len=32).to(device)
    x = torch.randn(2, 5, 16, generator=gen).to(device)
    out = pe(x, offset=4)
    torch.testing.assert_close(out - x, sinusoidal_table(5, 16, offset=4, device=device).expand(2, -1, -1))


def test_grown_table_equals_fresh_one_exactly():
    pe = SinusoidalPositionalEncoding(24, max_len=8)
    x = torch.zeros(1, 50, 24)
    out = pe(x, offset=30)
    assert pe.table.shape[0] >= 80
    assert torch.equal(pe.table, sinusoidal_table(pe.table.shape[0], 24))
    assert torch.equal(out[0], sinusoidal_table(50, 24, offset=30))


def test_incremental_decoding_matches_full_sequence(gen):
    pe = SinusoidalPositionalEncoding(16, max_len=4)
    x = torch.randn(2, 10, 16, generator=gen)
    steps = torch.cat([pe(x[:, i : i + 1], offset=i) for i in range(10)], dim=1)
    assert torch.equal(steps, pe(x))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_outputs_equal_the_float32_table_cast_down(dtype):
    pe = SinusoidalPositionalEncoding(64, max_len=16)
    x = torch.zeros(1, 1000, 64, dtype=dtype)
    out = pe(x)
    assert out.dtype == dtype
    assert torch.equal(out[0], sinusoidal_table(1000, 64).to(dtype))
    # the bug this avoids: positions counted in bfloat16 stop being distinct after 256
    assert not torch.equal(out[0, 257], out[0, 256])


def test_float64_input_gets_a_float64_accurate_table():
    """A float64 input must not be served a widened float32 table (errors of 1e-8 at position 1000)."""
    pe = SinusoidalPositionalEncoding(32, max_len=8)
    x = torch.zeros(1, 1200, 32, dtype=torch.float64)
    out = pe(x)[0]  # grows the cache past max_len as well
    torch.testing.assert_close(out, closed_form(1200, 32), rtol=0, atol=1e-12)
    assert (pe.encoding(1200, dtype=torch.float32).double() - closed_form(1200, 32)).abs().max() > 1e-9
    torch.testing.assert_close(
        pe.encoding(5, offset=1195, dtype=torch.float64), closed_form(5, 32, offset=1195), rtol=0, atol=1e-12
    )
    assert torch.equal(pe(torch.zeros(1, 1200, 32))[0], sinusoidal_table(1200, 32))  # float32 unchanged


def test_odd_d_model_is_rejected():
    with pytest.raises(ValueError, match=r"d_model must be a positive even number.*got 7.*use 8"):
        sinusoidal_table(10, 7)
    with pytest.raises(ValueError, match="even"):
        SinusoidalPositionalEncoding(7)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda pe: pe(torch.zeros(4, 16)), r"\(batch, seq, d_model\).*unsqueeze"),
        (lambda pe: pe(torch.zeros(2, 4, 8)), "d_model=16"),
        (lambda pe: pe(torch.zeros(2, 4, dtype=torch.long)), "floating-point"),
        (lambda pe: pe(torch.zeros(2, 4, 16), offset=-1), "offset must be >= 0"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call(SinusoidalPositionalEncoding(16))


def test_bad_table_arguments():
    with pytest.raises(ValueError, match="base must be > 1"):
        sinusoidal_table(4, 8, base=1.0)
    with pytest.raises(ValueError, match="length must be >= 0"):
        sinusoidal_table(-1, 8)


def test_meta_device_shapes():
    pe = SinusoidalPositionalEncoding(256, max_len=16, device="meta")
    out = pe(torch.empty(2, 100, 256, device="meta"))
    assert out.shape == (2, 100, 256) and out.device.type == "meta"


def test_lengths_must_be_whole_and_non_negative():
    """Before: encoding(-3) sliced table[0:-3] (13 rows) and a length of 10.5 gave 11 rows."""
    with pytest.raises(ValueError, match="length must be >= 0, got -3"):
        SinusoidalPositionalEncoding(8, max_len=16).encoding(-3)
    with pytest.raises(TypeError, match=r"length must be a whole number .*10.5.*int\(length\)"):
        sinusoidal_table(10.5, 64)


def test_double_and_deferred_initialisation_give_the_exact_table():
    """Before: .double() widened the float32 table (3e-8 off) and to_empty left uninitialised memory."""
    exact = sinusoidal_table(16, 8, dtype=torch.float64)
    assert torch.equal(SinusoidalPositionalEncoding(8, max_len=16).double().table, exact)
    with torch.device("meta"):
        lazy = SinusoidalPositionalEncoding(8, max_len=16)
    lazy.to_empty(device="cpu")
    lazy.reset_parameters()
    assert torch.equal(lazy.table, exact.float())
