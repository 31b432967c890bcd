"""Chapter 4 measurements (course_embed.lab.fusion) against independent references."""

import io
import math

import pytest
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from torch import nn

from course_embed import MultilingualEmbedding, TokenEmbedding, TransformerEmbedding
from course_embed.lab import fusion, fusion_figures, token_embedding


def test_max_abs_difference_broadcasts_in_float64():
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float16)
    assert fusion.max_abs_difference(a, torch.tensor([1.0, 1.5])) == 2.5
    assert fusion.max_abs_difference(a, a) == 0.0


def gpt_layers(width, d_ff, n_layers):
    """An independent count: GPT-style blocks built from torch modules."""

    def block():
        return nn.ModuleList(
            [
                nn.LayerNorm(width),
                nn.Linear(width, 3 * width),
                nn.Linear(width, width),
                nn.LayerNorm(width),
                nn.Linear(width, d_ff),
                nn.Linear(d_ff, width),
            ]
        )

    return sum(p.numel() for p in nn.ModuleList([block() for _ in range(n_layers)]).parameters())


@pytest.mark.parametrize("max_len", [0, 40])
def test_fusion_costs_match_built_modules(max_len):
    V, d, d_p, n_layers, d_ff, seq = 300, 48, 16, 2, 64, 20
    costs = fusion.fusion_costs(V, d, d_p, max_len, n_layers, d_ff, seq)
    position = "learned" if max_len else "sinusoidal"
    built = {
        "add": TransformerEmbedding(V, d, position, max_len=max_len or 8),
        "concat": TransformerEmbedding(V, d, position, fusion="concat", d_position=d_p, max_len=max_len or 8),
        "concat_wider": TransformerEmbedding(
            V, d + d_p, position, fusion="concat", d_position=d_p, max_len=max_len or 8
        ),
    }
    for name, module in built.items():
        c = costs[name]
        assert c["token"] == module.token.weight.numel()
        assert c["embedding"] == sum(p.numel() for p in module.parameters() if p is not module.norm)
        assert c["position"] == c["embedding"] - c["token"]
        assert c["layers"] == gpt_layers(c["width"], d_ff, n_layers)
        assert c["layer_flops"] == 2 * c["layers"] + 2 * n_layers * seq * c["width"]
    assert costs["add"]["fuse_flops"] == d and costs["concat"]["fuse_flops"] == costs["concat_wider"]["fuse_flops"] == 0
    assert costs["concat"]["layers"] == costs["add"]["layers"] < costs["concat_wider"]["layers"]
    assert costs["concat"]["embedding"] < costs["add"]["embedding"]  # at the same width, concat is the smaller


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(d_position=48), r"d_position must be in \(0, d_model=48\)"), (dict(max_len=-1), "max_len must be >= 0")],
)
def test_fusion_costs_bad_input(kwargs, match):
    args = dict(vocab_size=10, d_model=48, d_position=8, max_len=4, n_layers=1, d_ff=8, seq_len=4) | kwargs
    with pytest.raises(ValueError, match=match):
        fusion.fusion_costs(**args)


def test_expected_abs_cosine_closed_forms():
    assert math.isclose(fusion.expected_abs_cosine(1), 1.0, rel_tol=1e-12)  # cos = +-1 on a line
    assert math.isclose(fusion.expected_abs_cosine(2), 2 / math.pi, rel_tol=1e-12)  # E|cos(theta)|, theta uniform
    assert math.isclose(fusion.expected_abs_cosine(3), 0.5, rel_tol=1e-12)  # Archimedes: u uniform on [-1, 1]
    d = 4096
    assert math.isclose(fusion.expected_abs_cosine(d), math.sqrt(2 / (math.pi * d)), rel_tol=1 / d)
    with pytest.raises(ValueError, match="d_model"):
        fusion.expected_abs_cosine(0)


@pytest.mark.parametrize("d", [8, 100])
def test_mean_abs_cosine_monte_carlo_matches_closed_form(d, gen):
    random = torch.randn(200_000, d, generator=gen)
    fixed = torch.zeros(d)
    fixed[0] = 1.0
    assert math.isclose(fusion.mean_abs_cosine(random, fixed), fusion.expected_abs_cosine(d), rel_tol=0.01)


def test_mean_abs_cosine_exact_pairs():
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    b = torch.tensor([[0.0, 2.0], [-3.0, 0.0], [1.0, 1.0]])
    assert math.isclose(fusion.mean_abs_cosine(a, b), (0 + 1 + math.sqrt(0.5)) / 3, rel_tol=1e-12)


def test_fusion_probe_concat_keeps_both_and_balance_decides_add():
    torch.manual_seed(0)

    def g():
        return torch.Generator().manual_seed(0)

    concat = TransformerEmbedding(256, 32, fusion="concat", max_len=32).eval()
    assert fusion.fusion_probe(concat, 64, 32, g()) == {"token": 1.0, "position": 1.0, "position_within_1": 1.0}
    # more tokens than dimensions, so the token vectors fill every direction
    balanced = TransformerEmbedding(512, 128, max_len=32).eval()  # unit-RMS tokens, as large as the positions
    buried = TransformerEmbedding(512, 128, max_len=32, init="normal").eval()  # N(0, 1) * sqrt(d): chapter 2
    good, bad = fusion.fusion_probe(balanced, 128, 32, g()), fusion.fusion_probe(buried, 128, 32, g())
    assert good["token"] == bad["token"] == 1.0
    assert good["position"] > 0.5 and good["position_within_1"] > 0.9
    assert bad["position"] < 0.1 and bad["position_within_1"] < 0.2


def test_fusion_probe_refuses_training_mode():
    with pytest.raises(ValueError, match=r"model.eval\(\)"):
        fusion.fusion_probe(TransformerEmbedding(10, 8), 4, 4, torch.Generator())


@pytest.mark.parametrize("layer_norm", [False, True])
def test_added_tables_receive_the_same_gradient(device, gen, layer_norm):
    m = TransformerEmbedding(40, 16, "learned", max_len=12, dropout=0.0, layer_norm=layer_norm).to(device)
    ids = torch.randperm(40, generator=gen)[:10][None].to(device)  # one sequence, distinct ids
    upstream = torch.randn(1, 10, 16, generator=gen).to(device)
    token_grad, position_grad = fusion.fusion_gradients(m, ids, upstream)
    torch.testing.assert_close(token_grad[ids[0]], math.sqrt(16) * position_grad[:10], rtol=1e-5, atol=1e-6)
    assert torch.count_nonzero(position_grad[10:]) == 0 and m.token.weight.grad is None


def test_fusion_gradients_match_closed_forms(gen):
    V, d, d_p, b, s = 30, 12, 4, 3, 7
    ids = torch.randint(0, V, (b, s), generator=gen)  # repeated ids: their gradients add up
    upstream = torch.randn(b, s, d, generator=gen)
    add = TransformerEmbedding(V, d, "learned", max_len=s, dropout=0.0)
    token_grad, position_grad = fusion.fusion_gradients(add, ids, upstream)
    expected = torch.zeros(V, d).index_add_(0, ids.flatten(), upstream.reshape(-1, d)) * math.sqrt(d)
    torch.testing.assert_close(token_grad, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(position_grad, upstream.sum(dim=0), rtol=1e-5, atol=1e-5)
    concat = TransformerEmbedding(V, d, "learned", fusion="concat", d_position=d_p, max_len=s, dropout=0.0)
    token_grad, position_grad = fusion.fusion_gradients(concat, ids, upstream)
    expected = torch.zeros(V, d - d_p).index_add_(0, ids.flatten(), upstream[..., :-d_p].reshape(-1, d - d_p))
    torch.testing.assert_close(token_grad, expected * math.sqrt(d - d_p), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(position_grad, upstream[..., -d_p:].sum(dim=0), rtol=1e-5, atol=1e-5)


def test_fusion_gradients_bad_input():
    with pytest.raises(ValueError, match="position='learned'"):
        fusion.fusion_gradients(TransformerEmbedding(10, 8), torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 3, 8))
    with pytest.raises(ValueError, match=r"upstream must have the output's shape \(1, 3, 8\)"):
        fusion.fusion_gradients(
            TransformerEmbedding(10, 8, "learned"), torch.zeros(1, 3, dtype=torch.long), torch.zeros(3, 8)
        )


def test_layer_norm_parts_sum_to_layer_norm(device, gen):
    t = torch.randn(2, 5, 16, generator=gen, dtype=torch.float64).to(device) * 4 + 1
    p = torch.randn(5, 16, generator=gen, dtype=torch.float64).to(device)
    tp, pp = fusion.layer_norm_parts(t, p)
    torch.testing.assert_close(tp + pp, F.layer_norm(t + p, (16,)), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        pp.mean(dim=-1), torch.zeros(2, 5, dtype=torch.float64, device=device), rtol=0, atol=1e-12
    )


def test_scale_balance_exact_vectors():
    t = torch.tensor([[[3.0, 0.0, 0.0, 0.0]]])
    p = torch.tensor([[0.0, 4.0, 0.0, 0.0]])
    r = fusion.scale_balance(t, p)
    assert r == pytest.approx(
        {"fused_norm": 5.0, "token_norm": 3.0, "position_norm": 4.0, "position_share": 4 / 7}, rel=1e-12
    )


def test_layer_norm_rescales_but_keeps_the_share(gen):
    # zero-mean parts: LayerNorm divides both by the same sigma, so the share is unchanged and the norm is sqrt(d)
    d = 64
    t = torch.randn(3, 8, d, generator=gen, dtype=torch.float64) * 20
    p = torch.randn(8, d, generator=gen, dtype=torch.float64)
    t, p = t - t.mean(-1, keepdim=True), p - p.mean(-1, keepdim=True)
    before, after = fusion.scale_balance(t, p), fusion.scale_balance(t, p, layer_norm=True)
    assert after["position_share"] == pytest.approx(before["position_share"], rel=1e-12)
    assert after["fused_norm"] == pytest.approx(math.sqrt(d), rel=1e-4)
    assert after["fused_norm"] < before["fused_norm"] / 10


def test_binomial_mean_abs_error_closed_forms(gen):
    assert fusion.binomial_mean_abs_error(1, 0.9) == pytest.approx(2 * 0.1, rel=1e-12)  # |1/q - 1| q + p
    assert fusion.binomial_mean_abs_error(5, 1.0) == 0.0
    n, q = 3, 0.7
    brute = sum(math.comb(n, k) * q**k * (1 - q) ** (n - k) * abs(k / (n * q) - 1) for k in range(n + 1))
    assert fusion.binomial_mean_abs_error(n, q) == pytest.approx(brute, rel=1e-12)
    n = 20000  # normal limit
    assert fusion.binomial_mean_abs_error(n, q) == pytest.approx(math.sqrt(2 * (1 - q) / (math.pi * q * n)), rel=0.01)
    with pytest.raises(ValueError, match="keep in"):
        fusion.binomial_mean_abs_error(3, 0.0)


@pytest.mark.parametrize("start_training", [False, True])
def test_dropout_statistics(start_training):
    torch.manual_seed(0)
    m = TransformerEmbedding(50, 32, dropout=0.25).train(start_training)
    ids = torch.randint(0, 50, (4, 16))
    r = fusion.dropout_statistics(m, ids, 400)
    assert m.training == start_training
    assert r["p"] == 0.25 and r["eval_repeat_change"] == 0.0 and r["train_change"] > 0.1
    assert abs(r["zero_fraction"] - 0.25) < 0.005
    assert r["kept_scale_error"] < 1e-5
    assert r["mean_relative_error"] == pytest.approx(fusion.binomial_mean_abs_error(400, 0.75), rel=0.05)


def test_dropout_statistics_bad_input():
    with pytest.raises(ValueError, match=r"dropout probability must be in \(0, 1\)"):
        fusion.dropout_statistics(TransformerEmbedding(10, 8, dropout=0.0), torch.zeros(1, 2, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="n_samples"):
        fusion.dropout_statistics(TransformerEmbedding(10, 8), torch.zeros(1, 2, dtype=torch.long), 0)


@pytest.mark.parametrize("position", ["sinusoidal", None])
def test_pads_change_real_outputs_unless_masked(device, position):
    torch.manual_seed(0)
    d = 16
    emb = TransformerEmbedding(30, d, position, padding_idx=0).to(device).eval()
    attention = nn.MultiheadAttention(d, 2, batch_first=True).to(device).eval()
    ids = torch.tensor([[5, 7, 3, 9], [2, 2, 8, 1]], device=device)
    r = fusion.pad_influence(emb, attention, ids, 3, pad_id=0)
    # the pad row is zero; with positions added, a pad vector is the position vector, of norm sqrt(d / 2)
    assert r["pad_input_norm"] == pytest.approx(math.sqrt(d / 2) if position else 0.0, abs=1e-5)
    assert r["unmasked"] > 1e-3
    assert r["masked"] < 1e-5


def test_pad_influence_bad_input():
    emb = TransformerEmbedding(30, 8, padding_idx=0).eval()
    attention = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    ids = torch.tensor([[5, 7]])
    with pytest.raises(ValueError, match=r"\.eval\(\)"):
        fusion.pad_influence(emb.train(), attention, ids, 1, 0)
    emb.eval()
    with pytest.raises(ValueError, match="batch_first=True"):
        fusion.pad_influence(emb, nn.MultiheadAttention(8, 2).eval(), ids, 1, 0)
    with pytest.raises(ValueError, match="n_pads"):
        fusion.pad_influence(emb, attention, ids, 0, 0)
    with pytest.raises(ValueError, match="contain the pad id 0"):
        fusion.pad_influence(emb, attention, torch.tensor([[5, 0]]), 1, 0)


def test_vocabulary_parameters_match_built_tables():
    sizes = {"en": 300, "zh": 500, "fr": 200}
    r = fusion.vocabulary_parameters(8, 700, list(sizes.values()))
    assert r["shared"] == TokenEmbedding(700, 8).weight.numel()
    assert r["separate"] == sum(p.numel() for p in MultilingualEmbedding(sizes, 8).parameters())
    with pytest.raises(ValueError, match="must be positive"):
        fusion.vocabulary_parameters(8, 700, [])


def test_xlmr_base_token_table():
    assert token_embedding.parameter_count(fusion.XLMR_BASE)["token"] == 250002 * 768


# --- figures ----------------------------------------------------------------------------------------------


def png_bytes(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def test_fusion_probe_figure_draws_the_given_accuracies():
    d = [16, 64, 256]
    acc = {"add": [0.2, 0.5, 0.8], "concat": [1.0, 1.0, 1.0]}
    fig = fusion_figures.plot_fusion_probe(d, acc, chance=1 / 64)
    assert isinstance(fig, Figure)
    lines = fig.axes[0].get_lines()
    assert [list(line.get_ydata()) for line in lines[:2]] == [acc["add"], acc["concat"]]
    assert list(lines[0].get_xdata()) == d
    assert list(lines[2].get_ydata()) == [1 / 64, 1 / 64]  # the chance line
    assert fig.axes[0].get_xscale() == "log"
    assert png_bytes(fig).startswith(b"\x89PNG")


@pytest.mark.parametrize(
    "d, acc, match",
    [
        ([16, 64], {"add": [0.1]}, r"accuracies\['add'\] must hold 2 values, got 1"),
        ([16, 64], {}, "accuracies is empty"),
        ([0, 64], {"add": [0.1, 0.2]}, "d_models must be positive"),
    ],
)
def test_fusion_probe_figure_bad_input(d, acc, match):
    with pytest.raises(ValueError, match=match):
        fusion_figures.plot_fusion_probe(d, acc, chance=0.1)


def test_dropout_average_figure_is_log_log_with_both_series():
    n, measured, predicted = [1, 10, 100], [0.2, 0.07, 0.02], [0.2, 0.075, 0.025]
    fig = fusion_figures.plot_dropout_average(n, measured, predicted)
    ax = fig.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert [list(line.get_ydata()) for line in ax.get_lines()] == [predicted, measured]
    assert png_bytes(fig).startswith(b"\x89PNG")


@pytest.mark.parametrize(
    "args, match",
    [
        (([1, 10], [0.1], [0.1, 0.2]), "measured must hold 2 values"),
        (([1, 10], [0.1, 0.0], [0.1, 0.2]), "measured must be positive"),
        (([], [], []), "n_samples must hold at least one"),
    ],
)
def test_dropout_average_figure_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        fusion_figures.plot_dropout_average(*args)


def test_cosine_histograms_figure():
    values = torch.tensor([-0.5, 0.0, 0.1, 0.2])
    fig = fusion_figures.plot_cosine_histograms({16: values})
    ax = fig.axes[0]
    assert ax.get_xlabel() == "cos(token vector, position vector)"
    assert sorted(x for line in ax.lines for x in line.get_xdata()) == pytest.approx(
        [-fusion.expected_abs_cosine(16)] * 2 + [fusion.expected_abs_cosine(16)] * 2
    )
    with pytest.raises(ValueError, match="cosines is empty"):
        fusion_figures.plot_cosine_histograms({})


def test_plot_bars_heights_and_labels():
    fig = fusion_figures.plot_bars({"g1": {"a": 1.0, "b": 2.0}, "g2": {"a": 3.0, "b": 4.0}}, "y", "t")
    ax = fig.axes[0]
    heights = sorted(round(p.get_height(), 6) for p in ax.patches)
    assert heights == [1.0, 2.0, 3.0, 4.0] and ax.get_ylabel() == "y"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["g1", "g2"]
    with pytest.raises(ValueError, match="same bar labels|bar labels"):
        fusion_figures.plot_bars({"g1": {"a": 1.0}, "g2": {"b": 1.0}}, "y", "t")


def test_plot_pad_influence():
    fig = fusion_figures.plot_pad_influence([1, 2, 4], [0.1, 0.2, 0.3], [0.0, 0.0, 0.0])
    ax = fig.axes[0]
    assert ax.lines[0].get_ydata().tolist() == [0.1, 0.2, 0.3] and ax.get_xscale() == "log"
    with pytest.raises(ValueError, match="masked must hold 3"):
        fusion_figures.plot_pad_influence([1, 2, 4], [0.1, 0.2, 0.3], [0.0])


def test_plot_seed_dots_draws_every_seed_the_mean_and_the_median():
    values = {"a": torch.tensor([1.0, 2.0, 6.0]), "b": torch.tensor([4.0, 4.0])}
    fig = fusion_figures.plot_seed_dots(values, "steps", "t")
    ax = fig.axes[0]
    dots = [line.get_xdata().tolist() for line in ax.lines if line.get_marker() == "o"]
    assert dots == [[1.0, 2.0, 6.0], [4.0, 4.0]]
    red = [line for line in ax.lines if line.get_color() == "tab:red" and len(line.get_xdata())]
    medians = [line.get_xdata().tolist() for line in red]
    assert medians == [[2.0, 2.0], [4.0, 4.0]]
    means = [c.get_children()[0].get_xdata().tolist() for c in ax.containers]
    assert means == [[3.0], [4.0]]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    with pytest.raises(ValueError, match="at least two seeds"):
        fusion_figures.plot_seed_dots({"a": torch.tensor([1.0])}, "x", "t")
    with pytest.raises(ValueError, match="empty"):
        fusion_figures.plot_seed_dots({}, "x", "t")
