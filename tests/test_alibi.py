"""ALiBi against the paper's slope rule (hand-computed values) and the full distance-penalty form."""

import math

import numpy as np
import pytest
import torch

from course_embed.alibi import alibi_bias, alibi_slopes


def test_slopes_for_8_heads():
    expected = [2.0**-k for k in range(1, 9)]  # 1/2, 1/4, ..., 1/256
    torch.testing.assert_close(
        alibi_slopes(8, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64), rtol=1e-14, atol=0
    )


def test_slopes_for_16_heads():
    expected = [2.0 ** (-k / 2) for k in range(1, 17)]  # 2^-0.5, 2^-1, ..., 2^-8
    torch.testing.assert_close(
        alibi_slopes(16, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64), rtol=1e-14, atol=0
    )


def test_slopes_for_12_heads_interleave_the_16_head_sequence():
    # 8 heads' slopes, then every other slope of the 16-head sequence: 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5
    expected = [2.0**-k for k in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    torch.testing.assert_close(
        alibi_slopes(12, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64), rtol=1e-14, atol=0
    )


@pytest.mark.parametrize("num_heads", [1, 2, 3, 5, 6, 7, 20, 24, 40, 64])
def test_slopes_general_rule(num_heads):
    slopes = alibi_slopes(num_heads, dtype=torch.float64)
    closest = 2 ** math.floor(math.log2(num_heads))
    assert slopes.shape == (num_heads,) and bool((slopes > 0).all()) and bool((slopes < 1).all())
    ratio = 2.0 ** (-8 / closest)
    torch.testing.assert_close(
        slopes[:closest], ratio ** torch.arange(1, closest + 1, dtype=torch.float64), rtol=1e-14, atol=0
    )
    extra = (2.0 ** (-8 / (2 * closest))) ** torch.arange(1, 4 * closest, 2, dtype=torch.float64)
    torch.testing.assert_close(slopes[closest:], extra[: num_heads - closest], rtol=1e-14, atol=0)
    assert len(set(slopes.tolist())) == num_heads  # every head gets its own slope


def test_full_bias_is_minus_slope_times_distance(device):
    slopes = alibi_slopes(4, device=device)
    full = alibi_bias(slopes, 9, query_len=9)
    assert full.shape == (4, 9, 9) and full.device.type == device.type
    for h in range(4):
        for i in range(9):
            for j in range(9):
                assert full[h, i, j].item() == pytest.approx(-slopes[h].item() * abs(i - j), rel=1e-6)
    # a function of key - query only: constant along every diagonal
    torch.testing.assert_close(full[:, 1:, 1:], full[:, :-1, :-1], rtol=0, atol=0)


def test_key_only_bias_is_the_last_query_row_and_broadcasts(device):
    slopes = alibi_slopes(6, device=device)
    key_only = alibi_bias(slopes, 11)
    assert key_only.shape == (6, 1, 11)
    torch.testing.assert_close(key_only, alibi_bias(slopes, 11, query_len=11)[:, -1:], rtol=0, atol=0)
    torch.testing.assert_close(key_only, alibi_bias(slopes, 11, query_len=1), rtol=0, atol=0)


def causal_attention(scores, bias):
    q_len, k_len = scores.shape[-2:]
    future = torch.ones(q_len, k_len, dtype=torch.bool, device=scores.device).triu(k_len - q_len + 1)
    return (scores + bias).masked_fill(future, float("-inf")).softmax(dim=-1)


def test_key_only_and_full_bias_give_the_same_causal_attention(device, gen):
    slopes = alibi_slopes(8, dtype=torch.float64, device=device)
    scores = torch.randn(2, 8, 16, 16, generator=gen, dtype=torch.float64).to(device)
    full = causal_attention(scores, alibi_bias(slopes, 16, query_len=16))
    torch.testing.assert_close(causal_attention(scores, alibi_bias(slopes, 16)), full, rtol=1e-12, atol=1e-14)


def test_key_only_bias_with_a_kv_cache(device, gen):
    """Decoding 3 new tokens after 13 cached ones: same weights as the last 3 rows of the full computation."""
    slopes = alibi_slopes(5, dtype=torch.float64, device=device)
    scores = torch.randn(1, 5, 16, 16, generator=gen, dtype=torch.float64).to(device)
    full = causal_attention(scores, alibi_bias(slopes, 16, query_len=16))[:, :, -3:]
    cached = causal_attention(scores[:, :, -3:], alibi_bias(slopes, 16))
    torch.testing.assert_close(cached, full, rtol=1e-12, atol=1e-14)


def test_key_only_bias_as_sdpa_mask_when_decoding(gen):
    slopes = alibi_slopes(4)
    q, k, v = (torch.randn(2, 4, n, 8, generator=gen) for n in (1, 12, 12))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=alibi_bias(slopes, 12))
    weights = (q @ k.transpose(-1, -2) / math.sqrt(8) + alibi_bias(slopes, 12, query_len=1)).softmax(-1)
    torch.testing.assert_close(out, weights @ v, rtol=1e-5, atol=1e-6)


def test_bad_inputs():
    for bad in (0, -2):
        with pytest.raises(ValueError, match="num_heads must be a positive integer"):
            alibi_slopes(bad)
    with pytest.raises(TypeError, match=r"num_heads must be a whole number .*got 2.0 .*int\(num_heads\)"):
        alibi_slopes(2.0)
    assert torch.equal(alibi_slopes(np.int64(8)), alibi_slopes(torch.tensor(8)))  # integer counts of any kind
    slopes = alibi_slopes(4)
    with pytest.raises(TypeError, match=r"key_len must be a whole number .*got 10.5"):
        alibi_bias(slopes, 10.5)
    with pytest.raises(ValueError, match="key_len must be a positive integer"):
        alibi_bias(slopes, 0)
    with pytest.raises(ValueError, match=r"query_len must be in \[1, key_len=4\]"):
        alibi_bias(slopes, 4, query_len=5)
    with pytest.raises(ValueError, match=r"slopes must be a \(heads,\) tensor"):
        alibi_bias(slopes[None], 4)


def test_bfloat16_bias_is_computed_in_float32_and_rounded_once():
    """bfloat16 key positions collide above 256; the bias of 2000 keys is float32 work cast once (BLOOM's way)."""
    slopes = alibi_slopes(8, dtype=torch.bfloat16)
    expected = (slopes.float()[:, None] * (torch.arange(2000.0) - 1999))[:, None, :].bfloat16()
    assert torch.equal(alibi_bias(slopes, 2000), expected)
