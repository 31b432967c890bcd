"""The position schemes against the implementations the field runs: Hugging Face ``transformers`` (pinned in
requirements.txt) computes RoPE's frequencies and attention factors (``modeling_rope_utils``), BLOOM's ALiBi and T5's
relative-position buckets; the package must agree over a grid of configurations.

``transformers`` computes RoPE frequencies in float32 (``dtype=torch.float`` in its code), the package in float64,
so frequencies are compared at float32 round-off (relative 1e-5 leaves a margin over the ~1e-6 error of float32
``base ** x``); attention factors are Python floats in both and agree to 1e-12. BLOOM raises a float32 base to
integer powers, so slopes agree to 1e-6 relative; T5 buckets are equal.
"""

import itertools
import math

import pytest
import torch

transformers = pytest.importorskip("transformers")

from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.bloom.modeling_bloom import build_alibi_tensor  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402
from transformers.models.t5.modeling_t5 import T5Attention  # noqa: E402

from course_embed import alibi_bias, alibi_slopes, relative_position_bucket, rope_parameters  # noqa: E402

FREQ_TOL = dict(rtol=1e-5, atol=0)


def hf_rope(head_dim, base, rope_type, max_position_embeddings=4096, seq_len=None, **scaling):
    """transformers' frequencies (float64 copy of its float32 result) and attention factor for one config."""
    params = {"rope_type": rope_type, "rope_theta": base, **scaling}
    config = LlamaConfig(
        hidden_size=head_dim * 4,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=max_position_embeddings,
        rope_parameters=params,
    )
    if rope_type == "default":
        freqs, attention = LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        freqs, attention = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)
    return freqs.double(), float(attention)


def assert_same(ours, theirs):
    (freqs, attention), (hf_freqs, hf_attention) = ours, theirs
    torch.testing.assert_close(freqs, hf_freqs, **FREQ_TOL)
    assert attention == pytest.approx(hf_attention, rel=1e-12)


GRID = list(itertools.product([16, 64, 128], [10000.0, 500000.0]))


@pytest.mark.parametrize("head_dim, base", GRID)
def test_default_and_linear(head_dim, base):
    assert_same(rope_parameters(head_dim, base), hf_rope(head_dim, base, "default"))
    for factor in (2.0, 4.0, 32.0):
        assert_same(
            rope_parameters(head_dim, base, {"rope_type": "linear", "factor": factor}),
            hf_rope(head_dim, base, "linear", factor=factor),
        )


@pytest.mark.parametrize("head_dim, base", GRID)
@pytest.mark.parametrize("factor", [1.0, 2.0, 8.0])
def test_dynamic_ntk_at_several_lengths(head_dim, base, factor):
    scaling = {"rope_type": "dynamic", "factor": factor, "original_max_position_embeddings": 1024}
    for seq_len in (10, 1024, 1025, 4096, 100_000):
        assert_same(
            rope_parameters(head_dim, base, scaling, seq_len=seq_len),
            hf_rope(head_dim, base, "dynamic", 1024, seq_len=seq_len, factor=factor),
        )


YARN = [
    dict(factor=4.0, original_max_position_embeddings=64),  # the 16-wide head of the chapter's old experiment
    dict(factor=4.0, original_max_position_embeddings=32768),  # Qwen2.5's documented YaRN config
    dict(factor=8.0, original_max_position_embeddings=4096, beta_fast=16.0, beta_slow=2.0),
    dict(factor=16.0, original_max_position_embeddings=2048, truncate=False),
    dict(factor=40.0, original_max_position_embeddings=4096, mscale=1.0, mscale_all_dim=1.0),  # DeepSeek-V3
    dict(factor=40.0, original_max_position_embeddings=4096, mscale=0.707, mscale_all_dim=0.707),  # DeepSeek-V2
    dict(factor=40.0, original_max_position_embeddings=4096, mscale=1.0, mscale_all_dim=0.5),
    dict(factor=4.0, original_max_position_embeddings=4096, attention_factor=1.0),
]


@pytest.mark.parametrize("head_dim, base", GRID)
@pytest.mark.parametrize("scaling", YARN, ids=lambda s: "-".join(f"{k[:6]}{v}" for k, v in s.items()))
def test_yarn(head_dim, base, scaling):
    assert_same(
        rope_parameters(head_dim, base, {"rope_type": "yarn", **scaling}), hf_rope(head_dim, base, "yarn", **scaling)
    )


LLAMA3 = [
    dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192),  # 3.1
    dict(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192),  # 3.2
    dict(factor=4.0, low_freq_factor=2.0, high_freq_factor=8.0, original_max_position_embeddings=512),
]


@pytest.mark.parametrize("head_dim, base", GRID)
@pytest.mark.parametrize("scaling", LLAMA3, ids=["llama3.1", "llama3.2", "small"])
def test_llama3(head_dim, base, scaling):
    assert_same(
        rope_parameters(head_dim, base, {"rope_type": "llama3", **scaling}),
        hf_rope(head_dim, base, "llama3", **scaling),
    )


@pytest.mark.parametrize("head_dim, base", GRID)
def test_longrope_short_and_long(head_dim, base, gen):
    pairs = head_dim // 2
    short = (1 + torch.rand(pairs, generator=gen)).tolist()
    long = (1 + 30 * torch.rand(pairs, generator=gen)).sort().values.tolist()
    for attention in (None, 1.25):
        scaling = dict(factor=32.0, original_max_position_embeddings=4096, short_factor=short, long_factor=long)
        if attention is not None:
            scaling["attention_factor"] = attention
        for seq_len in (None, 4096, 4097, 131072):
            assert_same(
                rope_parameters(head_dim, base, {"rope_type": "longrope", **scaling}, seq_len=seq_len),
                hf_rope(head_dim, base, "longrope", 131072, seq_len=seq_len, **scaling),
            )


@pytest.mark.parametrize("heads", [1, 2, 3, 4, 6, 8, 12, 16, 20, 32, 40, 64, 96])
def test_alibi_against_bloom(heads):
    """BLOOM's bias is ``m_h * j``: ours ``-m_h (k - 1 - j)`` plus the per-query constant ``m_h (k - 1)``."""
    keys = 37
    bloom = build_alibi_tensor(torch.ones(1, keys), heads, torch.float64)  # (h, 1, k)
    slopes = alibi_slopes(heads, dtype=torch.float64)
    torch.testing.assert_close(slopes, bloom[:, 0, 1], rtol=1e-6, atol=0)  # BLOOM: float32 base ** k
    ours = alibi_bias(slopes, keys) + slopes[:, None, None] * (keys - 1)
    torch.testing.assert_close(ours, bloom, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (8, 16), (64, 256), (16, 1000)])
def test_t5_buckets(bidirectional, num_buckets, max_distance):
    offsets = torch.arange(-1500, 1500)[None, :]
    theirs = T5Attention._relative_position_bucket(
        offsets, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    ours = relative_position_bucket(
        offsets, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert torch.equal(ours, theirs)


def test_the_oracle_can_fail():
    """A wrong formula is caught: NTK's exponent without the d/(d-2) correction differs beyond the tolerance."""
    freqs, _ = rope_parameters(64, 10000.0, {"rope_type": "ntk", "factor": 8.0})
    hf, _ = hf_rope(64, 10000.0 * 8.0, "default")
    assert not torch.allclose(freqs, hf, **FREQ_TOL)
    assert math.isclose(freqs[0].item(), hf[0].item())  # the fastest pair agrees, the rest do not
