"""The package's RoPE in the place of a Hugging Face model's rotary module, in one call:
``model.model.rotary_emb = RotaryEmbedding.from_config(model.config).for_transformers()``.

Tiny random float64 models (Llama with llama3 and with dynamic NTK, Qwen2 with YaRN, Phi-3 with LongRoPE and partial
rotation) run a left-padded prompt and 60 cached decode steps past their original context, once as shipped and once
with the package's rotary module. transformers computes its angles and norms in float32; run in float64 (the
``float64_transformers`` fixture), its logits and the package's agree to float64 round-off, and a base off by 1e-6
relative (the control) moves them by more than 1e-9.
"""

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import (  # noqa: E402
    DynamicCache,
    LlamaConfig,
    LlamaForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from course_embed import RotaryEmbedding  # noqa: E402

L0 = 16
SMALL = dict(
    vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, attn_implementation="sdpa",
)  # fmt: skip
PAIRS = 8  # head_dim 16 -> 8 pairs


def models():
    longrope = {
        "rope_type": "longrope",
        "short_factor": [1.0 + 0.1 * i for i in range(PAIRS // 2)],
        "long_factor": [1.0 + 0.5 * i for i in range(PAIRS // 2)],
    }
    return {
        "llama-llama3": (LlamaForCausalLM, LlamaConfig(**SMALL, max_position_embeddings=4 * L0, rope_scaling={
            "rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": L0, "rope_theta": 10000.0})),
        "llama-dynamic": (LlamaForCausalLM, LlamaConfig(**SMALL, max_position_embeddings=L0, rope_scaling={
            "rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0})),
        "qwen2-yarn": (Qwen2ForCausalLM, Qwen2Config(**SMALL, max_position_embeddings=4 * L0, rope_scaling={
            "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": L0, "rope_theta": 10000.0})),
        "phi3-longrope-partial": (Phi3ForCausalLM, Phi3Config(
            **SMALL, max_position_embeddings=4 * L0, original_max_position_embeddings=L0, partial_rotary_factor=0.5,
            rope_scaling=longrope | {"rope_theta": 10000.0}, pad_token_id=0)),
    }  # fmt: skip


def run(model, ids, mask, steps):
    """Logits of a left-padded prompt, then of ``steps`` cached decode steps (teacher forced): ``(b, s + steps, V)``."""
    cache = DynamicCache(config=model.config)
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    out = [model(ids, attention_mask=mask, position_ids=position_ids, past_key_values=cache).logits]
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        token = torch.randint(1, 101, (ids.shape[0], 1), generator=gen)
        mask = torch.cat((mask, torch.ones_like(token)), dim=-1)
        position_ids = position_ids[:, -1:] + 1
        out.append(model(token, attention_mask=mask, position_ids=position_ids, past_key_values=cache).logits)
    return torch.cat(out, dim=1)


@pytest.fixture
def float64_transformers(monkeypatch):
    """transformers' own code computed in float64: its RoPE init functions, rotary modules and RMSNorms ask for
    float32 (``torch.float``, ``.float()``, ``.to(torch.float32)``) and dynamic NTK for the default dtype; here all of
    them mean float64, so the reference is exact to float64 round-off instead of float32's."""
    monkeypatch.setattr(torch, "float", torch.float64)
    monkeypatch.setattr(torch, "float32", torch.float64)
    monkeypatch.setattr(torch.Tensor, "float", torch.Tensor.double)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


@pytest.mark.parametrize("name", list(models()))
def test_logits_equal_transformers_in_float64(name, float64_transformers):
    cls, config = models()[name]
    torch.manual_seed(0)
    model = cls(config).eval()
    for layer in model.model.layers:  # larger q/k so that attention depends on position
        attn = layer.self_attn
        (attn.q_proj if hasattr(attn, "q_proj") else attn.qkv_proj).weight.data *= 3
    model.model.rotary_emb = type(model.model.rotary_emb)(config)  # frequencies from transformers, in float64
    ids = torch.randint(1, 101, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :7] = 0  # left padding: the second prompt has 5 tokens
    rule = "transformers" if "dynamic" in name else "paper"
    ours, control = copy.deepcopy(model), copy.deepcopy(model)
    ours.model.rotary_emb = RotaryEmbedding.from_config(config, dynamic_rule=rule).for_transformers()
    kwargs = RotaryEmbedding.from_config(config).__dict__["_fixed"]
    control.model.rotary_emb = RotaryEmbedding(
        kwargs["head_dim"],
        kwargs["base"] * (1 + 1e-6),
        layout="half",
        rope_scaling=kwargs["rope_scaling"],
        dynamic_rule=rule,
    ).for_transformers()
    with torch.no_grad():
        expected, got, off = (run(m, ids, mask, steps=60) for m in (model, ours, control))
    assert expected.dtype == torch.float64
    keep = mask.bool()[:, :, None].expand(-1, -1, expected.shape[-1])  # pad rows of the prompt are not compared
    prompt = expected.shape[1] - 60
    gap = (got - expected).abs()
    assert gap[:, :prompt][keep].max() < 1e-12 and gap[:, prompt:].max() < 1e-12
    assert (off - expected).abs()[:, prompt:].max() > 1e-9  # a base off by 1e-6 relative shows
