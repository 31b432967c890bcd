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


# --- real model configs, built offline from their published values --------------------------------------------

from transformers import DeepseekV3Config, Phi3Config, Qwen2Config  # noqa: E402
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf_deepseek  # noqa: E402
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb  # noqa: E402
from transformers.models.phi3 import modeling_phi3 as hf_phi3  # noqa: E402
from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding  # noqa: E402

from course_embed import RotaryEmbedding, layout_permutation  # noqa: E402
from course_embed.rope_config import rope_kwargs  # noqa: E402
from course_embed.rope_scaling import softmax_scale  # noqa: E402

PHI35_LONG = [
    1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601, 1.5899999141693115,
    1.600000023841858, 1.6200000047683716, 2.620000123977661, 3.2300000190734863, 3.2300000190734863,
    4.789999961853027, 7.400000095367432, 7.700000286102295, 9.09000015258789, 12.199999809265137,
    17.670000076293945, 24.46000099182129, 28.57000160217285, 30.420001983642578, 30.840002059936523,
    32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992, 50.340003967285156,
    50.45000457763672, 57.55000305175781, 57.93000411987305, 58.21000289916992, 60.1400032043457,
    62.61000442504883, 62.62000274658203, 62.71000289916992, 63.1400032043457, 63.1400032043457,
    63.77000427246094, 63.93000411987305, 63.96000289916992, 63.970001220703125, 64.02999877929688,
    64.06999969482422, 64.08000183105469, 64.12000274658203, 64.41000366210938, 64.4800033569336,
    64.51000213623047, 64.52999877929688, 64.83999633789062,
]  # fmt: skip
PHI35_SHORT = [
    1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705, 1.0499999523162842, 1.0499999523162842,
    1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0699999332427979, 1.0999999046325684,
    1.1099998950958252, 1.1599998474121094, 1.1599998474121094, 1.1699998378753662, 1.2899998426437378,
    1.339999794960022, 1.679999828338623, 1.7899998426437378, 1.8199998140335083, 1.8499997854232788,
    1.8799997568130493, 1.9099997282028198, 1.9399996995925903, 1.9899996519088745, 2.0199997425079346,
    2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0799996852874756,
    2.0899996757507324, 2.189999580383301, 2.2199995517730713, 2.5899994373321533, 2.729999542236328,
    2.749999523162842, 2.8399994373321533,
]  # fmt: skip
PHI4_MINI_LONG = [
    1, 1.118320672, 1.250641126, 1.398617824, 1.564103225, 1.74916897, 1.956131817, 2.187582649, 2.446418898,
    2.735880826, 3.059592084, 3.421605075, 3.826451687, 4.279200023, 4.785517845, 5.351743533, 5.984965424,
    6.693110555, 7.485043894, 8.370679318, 9.36110372, 10.4687158, 11.70738129, 13.09260651, 14.64173252,
    16.37415215, 18.31155283, 20.47818807, 22.90118105, 25.61086418, 28.64115884, 32.03, 32.1, 32.13, 32.23,
    32.6, 32.61, 32.64, 32.66, 32.7, 32.71, 32.93, 32.97, 33.28, 33.49, 33.5, 44.16, 47.77,
]  # fmt: skip
LLAMA31_SCALING = {
    "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}  # fmt: skip


def real_configs():
    """(name, config, the model's rotary class, its apply function, our layout) for published configs."""
    llama = dict(num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072)
    deepseek_scaling = {
        "type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
    }  # fmt: skip
    phi = dict(hidden_size=3072, max_position_embeddings=131072, original_max_position_embeddings=4096)
    return [
        (
            "llama-3.1-8b",
            LlamaConfig(hidden_size=4096, rope_theta=500000.0, rope_scaling=dict(LLAMA31_SCALING), **llama),
            LlamaRotaryEmbedding,
            apply_rotary_pos_emb,
            "half",
        ),
        (
            "llama-3.2-1b",
            LlamaConfig(
                hidden_size=2048, head_dim=64, rope_theta=500000.0, rope_scaling=LLAMA31_SCALING | {"factor": 32.0}
            ),
            LlamaRotaryEmbedding,
            apply_rotary_pos_emb,
            "half",
        ),
        (
            "qwen2.5-7b-yarn",
            Qwen2Config(
                hidden_size=3584,
                num_attention_heads=28,
                num_key_value_heads=4,
                max_position_embeddings=32768,
                rope_theta=1000000.0,
                rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
            ),
            Qwen2RotaryEmbedding,
            apply_rotary_pos_emb,
            "half",
        ),  # fmt: skip
        (
            "deepseek-v3",
            DeepseekV3Config(
                hidden_size=7168,
                num_attention_heads=128,
                qk_rope_head_dim=64,
                qk_nope_head_dim=128,
                v_head_dim=128,
                kv_lora_rank=512,
                q_lora_rank=1536,
                max_position_embeddings=163840,
                rope_theta=10000.0,
                rope_scaling=deepseek_scaling,
            ),
            hf_deepseek.DeepseekV3RotaryEmbedding,
            hf_deepseek.apply_rotary_pos_emb_interleave,  # rope_interleave=True: adjacent pairs
            "interleaved",
        ),  # fmt: skip
        (
            "phi-3.5-mini",
            Phi3Config(
                num_attention_heads=32,
                rope_theta=10000.0,
                rope_scaling={"type": "longrope", "long_factor": PHI35_LONG, "short_factor": PHI35_SHORT},
                **phi,
            ),
            hf_phi3.Phi3RotaryEmbedding,
            hf_phi3.apply_rotary_pos_emb,
            "half",
        ),  # fmt: skip
        (
            "phi-4-mini",
            Phi3Config(
                num_attention_heads=24,
                num_key_value_heads=8,
                partial_rotary_factor=0.75,
                rope_theta=10000.0,
                rope_scaling={"type": "longrope", "long_factor": PHI4_MINI_LONG, "short_factor": [1.0] * 48},
                **phi,
            ),
            hf_phi3.Phi3RotaryEmbedding,
            hf_phi3.apply_rotary_pos_emb,  # rotates the first 96 of 128 dims
            "half",
        ),  # fmt: skip
    ]


REAL = real_configs()


@pytest.mark.parametrize("name, config, rotary, apply, layout", REAL, ids=[r[0] for r in REAL])
def test_real_configs_give_transformers_frequencies(name, config, rotary, apply, layout):
    kwargs = rope_kwargs(config)
    assert rope_kwargs(config.to_dict()) == kwargs  # the object or its dict
    scaling = kwargs["rope_scaling"]
    kind = scaling["rope_type"] if scaling else "default"
    init = ROPE_INIT_FUNCTIONS[kind] if kind != "default" else rotary.compute_default_rope_parameters
    lengths = (None, 4096, 4097) if kind == "longrope" else (None,)
    for seq_len in lengths:
        hf_freqs, hf_attention = init(config, "cpu", seq_len=seq_len)
        ours = rope_parameters(kwargs["head_dim"], kwargs["base"], scaling, seq_len=seq_len)
        assert_same(ours, (hf_freqs.double(), float(hf_attention)))


@pytest.mark.parametrize("name, config, rotary, apply, layout", REAL, ids=[r[0] for r in REAL])
@pytest.mark.parametrize("reach", ["short", "long"])
def test_real_configs_rotate_as_the_model_does(gen, name, config, rotary, apply, layout, reach):
    ours = RotaryEmbedding.from_config(config, layout=layout)
    head_dim = ours.head_dim
    end = 4000 if reach == "short" else 4200  # LongRoPE switches to its long factors past 4096
    position_ids = torch.arange(0, end, 37)[None].expand(2, -1)
    q = torch.randn(2, 3, position_ids.shape[1], head_dim, generator=gen)
    k = torch.randn(2, 1, position_ids.shape[1], head_dim, generator=gen)
    cos, sin = rotary(config)(q, position_ids)
    hf_q, hf_k = apply(q, k, cos, sin)
    if name == "deepseek-v3":  # its apply de-interleaves the pairs first: the output is in the half layout
        perm = layout_permutation(head_dim)
        hf_q, hf_k = hf_q[..., perm], hf_k[..., perm]
    our_q, our_k = ours(q, k, position_ids=position_ids)
    # transformers computes the angles in float32 (an error of ~ position * 6e-8 rad); ours in float64
    torch.testing.assert_close(our_q, hf_q, rtol=0, atol=2e-3)
    torch.testing.assert_close(our_k, hf_k, rtol=0, atol=2e-3)


def test_deepseek_softmax_scale_is_transformers():
    config = REAL[3][1]
    scaling = rope_kwargs(config)["rope_scaling"]
    qk_head_dim = config.qk_nope_head_dim + config.qk_rope_head_dim  # 192
    expected = hf_deepseek.yarn_apply_mscale(config.rope_parameters, qk_head_dim**-0.5)
    assert softmax_scale(qk_head_dim, scaling) == pytest.approx(expected, rel=1e-14)
    m = 0.1 * 1.0 * math.log(40) + 1  # mscale_all_dim = 1, factor = 40
    assert softmax_scale(qk_head_dim, scaling) == pytest.approx(192**-0.5 * m * m, rel=1e-14)
    assert softmax_scale(128, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}) == (
        128**-0.5
    )  # no mscale_all_dim: the plain scale


def test_left_padded_batch_matches_apply_rotary_pos_emb(gen):
    config = LlamaConfig(hidden_size=256, num_attention_heads=4, rope_theta=500000.0, rope_scaling=LLAMA31_SCALING)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]])
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    q = torch.randn(2, 4, 7, 64, generator=gen)
    k = torch.randn(2, 2, 7, 64, generator=gen)
    hf_q, hf_k = apply_rotary_pos_emb(q, k, *LlamaRotaryEmbedding(config)(q, position_ids))
    rope = RotaryEmbedding.from_config(config)
    our_q, our_k = rope(q, k, position_ids=position_ids)
    torch.testing.assert_close(our_q, hf_q, rtol=0, atol=1e-5)
    torch.testing.assert_close(our_k, hf_k, rtol=0, atol=1e-5)
    alone = rope.rotate(q[:1, :, 3:], offset=0)  # the padded sequence's real tokens start at position 0
    torch.testing.assert_close(our_q[:1, :, 3:], alone, rtol=0, atol=1e-6)
    step_q, _ = rope(q[:, :, :1], k[:, :, :1], position_ids=position_ids[:, -1:] + 1)  # the next decoding step
    hf_step, _ = apply_rotary_pos_emb(
        q[:, :, :1], k[:, :, :1], *LlamaRotaryEmbedding(config)(q, position_ids[:, -1:] + 1)
    )
    torch.testing.assert_close(step_q, hf_step, rtol=0, atol=1e-5)


DYNAMIC_CALLS = [(0, 96), (0, 80), (0, 160), (128, 1), (129, 1), (0, 40), (0, 80)]  # (offset, length)


def test_dynamic_rule_transformers_reproduces_dynamic_rope_update(gen):
    """L0 = 64: a prompt of 1.25 L0 after one of 1.5 L0, decoding steps at 2 L0, a reset by a short call."""
    config = LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        max_position_embeddings=64,
        rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
    )
    hf = LlamaRotaryEmbedding(config)
    stateful = RotaryEmbedding.from_config(config, dynamic_rule="transformers")
    paper = RotaryEmbedding.from_config(config)
    differs = []
    for offset, length in DYNAMIC_CALLS:
        q = torch.randn(1, 2, length, 16, generator=gen, dtype=torch.float64)
        position_ids = torch.arange(offset, offset + length)[None]
        cos, sin = hf(q, position_ids)
        expected, _ = apply_rotary_pos_emb(q, q, cos.double(), sin.double())
        torch.testing.assert_close(stateful.rotate(q, offset), expected, rtol=0, atol=1e-4)
        differs.append(not torch.allclose(paper.rotate(q, offset), expected, rtol=0, atol=1e-4))
    # the paper's rule (the current length) differs exactly where transformers keeps a longer length
    assert differs == [False, True, False, True, True, False, False]


# --- configs transformers accepts that older readers refused --------------------------------------------------

from transformers import GPTNeoXConfig  # noqa: E402
from transformers.models.gpt_neox import modeling_gpt_neox as hf_neox  # noqa: E402

SMALL = dict(hidden_size=256, num_attention_heads=4, max_position_embeddings=128)


def accepted_configs():
    """(name, config, the model's rotary class, its apply function, the config.json dict as shipped)."""
    yarn = {"rope_type": "yarn", "rope_theta": 1e4, "original_max_position_embeddings": 32}
    neox_json = {"rotary_pct": 0.25, "rotary_emb_base": 5e4, **SMALL}  # GPT-NeoX / Pythia config.json keys
    proportional = {"rope_type": "proportional", "rope_theta": 1e4, "partial_rotary_factor": 0.25}
    return [
        ("yarn-without-factor", Qwen2Config(rope_parameters=yarn | {"factor": None}, **SMALL), Qwen2RotaryEmbedding,
         apply_rotary_pos_emb, None),
        ("yarn-finetuned", Qwen2Config(rope_parameters=yarn | {"factor": 4.0, "finetuned": True}, **SMALL),
         Qwen2RotaryEmbedding, apply_rotary_pos_emb, None),
        ("gpt-neox", GPTNeoXConfig(**neox_json), hf_neox.GPTNeoXRotaryEmbedding, hf_neox.apply_rotary_pos_emb,
         neox_json),
        ("proportional", LlamaConfig(rope_parameters=proportional, **SMALL), LlamaRotaryEmbedding,
         apply_rotary_pos_emb, None),
    ]  # fmt: skip


ACCEPTED = accepted_configs()


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name, config, rotary, apply, shipped", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_configs_transformers_accepts_load_and_rotate_as_the_model_does(gen, name, config, rotary, apply, shipped):
    kwargs = rope_kwargs(config)
    assert rope_kwargs(config.to_dict()) == kwargs
    if shipped is not None:
        assert rope_kwargs(shipped) == kwargs | {"rope_scaling": {"partial_rotary_factor": 0.25}}
    kind = config.rope_parameters["rope_type"]
    init = ROPE_INIT_FUNCTIONS[kind] if kind != "default" else rotary.compute_default_rope_parameters
    hf_freqs, hf_attention = init(config, "cpu")
    freqs, attention = rope_parameters(kwargs["head_dim"], kwargs["base"], kwargs["rope_scaling"])
    assert_same((freqs, attention), (hf_freqs.double(), float(hf_attention)))
    ours = RotaryEmbedding.from_config(config)
    position_ids = torch.arange(0, 200, 7)[None].expand(2, -1)  # past max_position_embeddings as well
    q = torch.randn(2, 3, position_ids.shape[1], ours.head_dim, generator=gen)
    k = torch.randn(2, 1, position_ids.shape[1], ours.head_dim, generator=gen)
    cos, sin = rotary(config)(q, position_ids)
    hf_q, hf_k = apply(q, k, cos, sin)
    our_q, our_k = ours(q, k, position_ids=position_ids)
    torch.testing.assert_close(our_q, hf_q, rtol=0, atol=1e-4)  # float32 angles at positions < 200
    torch.testing.assert_close(our_k, hf_k, rtol=0, atol=1e-4)
