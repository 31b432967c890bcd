import math

import pytest
import torch

from course_embed.lab import token_embedding
from course_embed.lab.token_embedding import ModelConfig, parameter_count


@pytest.mark.parametrize(
    "cfg, total",
    [
        (token_embedding.BERT_BASE, 109_482_240),  # bert-base-uncased
        (token_embedding.BERT_LARGE, 335_141_888),  # bert-large-uncased
        (token_embedding.GPT2_SMALL, 124_439_808),  # gpt2
        (token_embedding.LLAMA2_7B, 6_738_415_616),  # Llama-2-7b
    ],
)
def test_parameter_counts_match_released_checkpoints(cfg, total):
    assert parameter_count(cfg)["total"] == total


def test_bert_base_token_table():
    assert parameter_count(token_embedding.BERT_BASE)["token"] == 23_440_896 == 30522 * 768


def test_parameter_count_matches_a_built_model():
    # an independent count: build a small pre-LN GPT-style model with torch modules and count its parameters
    d, ff, V, L, P = 32, 64, 100, 3, 16

    def block():
        return torch.nn.ModuleList(
            [
                torch.nn.LayerNorm(d),
                torch.nn.Linear(d, 3 * d),
                torch.nn.Linear(d, d),
                torch.nn.LayerNorm(d),
                torch.nn.Linear(d, ff),
                torch.nn.Linear(ff, d),
            ]
        )

    model = torch.nn.ModuleList(
        [torch.nn.Embedding(V, d), torch.nn.Embedding(P, d), torch.nn.LayerNorm(d)] + [block() for _ in range(L)]
    )
    built = sum(p.numel() for p in model.parameters())
    assert parameter_count(ModelConfig("tiny", V, d, L, ff, positions=P))["total"] == built


@pytest.mark.parametrize("init", ["normal", "xavier_uniform", "scaled_normal"])
def test_init_std_closed_forms(init):
    V, d = 3000, 128
    xavier = math.sqrt(6 / (V + d)) / math.sqrt(3)  # U(-a, a) has std a / sqrt(3)
    expected = {"normal": 1.0, "xavier_uniform": xavier, "scaled_normal": 1 / math.sqrt(d)}
    assert math.isclose(token_embedding.init_std(init, V, d), expected[init], rel_tol=1e-12)


def test_init_std_rejects_unknown():
    with pytest.raises(ValueError, match="init must be one of"):
        token_embedding.init_std("uniform", 3, 2)


def test_row_norms_in_float64():
    w = torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=torch.float16)
    norms = token_embedding.row_norms(w)
    assert norms.dtype == torch.float64 and norms.tolist() == [5.0, 0.0]
