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


def test_figures_label_their_axes_and_reject_bad_input():
    import matplotlib.pyplot as plt

    cos = torch.eye(3, dtype=torch.float64)
    fig = token_embedding.plot_cosines({"a": cos, "b": cos}, ["x", "y", "z"])
    assert [ax.get_title() for ax in fig.axes[:2]] == ["a", "b"]
    with pytest.raises(ValueError, match=r"panels\['a'\] must be \(2, 2\)"):
        token_embedding.plot_cosines({"a": cos}, ["x", "y"])

    fig = token_embedding.plot_row_gradients([0.0, 2.0, 1.0], [5, 1, 2], pad_id=0)
    assert fig.axes[0].get_ylabel() == "gradient norm of the row"
    assert fig.axes[0].patches[0].get_height() == 0.0  # the pad bar is empty, marked at 0
    with pytest.raises(ValueError, match="pad_id must lie in"):
        token_embedding.plot_row_gradients([0.0, 1.0], [1, 1], pad_id=2)
    fig = token_embedding.plot_row_gradients([0.0, 2.0, 1.0], [5, 1, 2], pad_id=0, control=[3.0, 2.0, 1.0])
    assert [p.get_height() for p in fig.axes[0].patches] == [0.0, 2.0, 1.0, 3.0, 2.0, 1.0]  # both sets of bars
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["padding_idx=0", "padding_idx=None"]
    with pytest.raises(ValueError, match="control must hold 3 values"):
        token_embedding.plot_row_gradients([0.0, 2.0, 1.0], [5, 1, 2], pad_id=0, control=[1.0])

    norms = {"a": torch.tensor([0.3, 0.31]), "b": torch.tensor([21.0, 22.0])}
    fig = token_embedding.plot_row_norm_histograms(norms, 16.0, 100, 512)
    title = "Mean row norms differ by a factor of 70 across init schemes"  # 21.5 / 0.305
    assert fig.axes[0].get_title() == title
    with pytest.raises(ValueError, match="positive"):
        token_embedding.plot_row_norm_histograms({"a": torch.tensor([0.0, 1.0])}, 16.0, 100, 512)

    runs = {"corpus": [0.4, 0.5, 0.45], "shuffled": [0.0, 0.02, -0.01]}
    fig = token_embedding.plot_seed_dots({"gap": ("cosine", runs), "one": ("x", {"a": [1.0]})})
    assert [ax.get_title() for ax in fig.axes] == ["gap", "one"]
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["corpus", "shuffled"]
    assert fig.axes[0].lines[1].get_xdata().tolist() == [0.0, 0.02, -0.01]  # one dot per seed
    assert fig.axes[0].get_xlabel() == "cosine"
    with pytest.raises(ValueError, match="has no runs"):
        token_embedding.plot_seed_dots({"empty": ("x", {})})

    configs = token_embedding.PUBLISHED_CONFIGS
    fig = token_embedding.plot_embedding_share(configs, [0.2, 0.1, 0.3, 0.02])
    assert fig.axes[0].get_xscale() == "log"
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[:2] == ["one table: 1 / (1 + 12Ld/V)", "untied, input table: 1 / (2 + 12Ld/V)"]
    assert "exact, untied" in legend  # LLaMA-2 7B is untied
    with pytest.raises(ValueError, match="shares must hold 4 values"):
        token_embedding.plot_embedding_share(configs, [0.2])
    plt.close("all")
