"""Chapter 4 measurements (course_embed.analysis, section 'chapter 4: fusion') against independent references."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_embed import MultilingualEmbedding, TokenEmbedding, TransformerEmbedding, analysis


def test_max_abs_difference_broadcasts_in_float64():
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float16)
    assert analysis.max_abs_difference(a, torch.tensor([1.0, 1.5])) == 2.5
    assert analysis.max_abs_difference(a, a) == 0.0


def gpt_layers(width, d_ff, n_layers):
    """An independent count: GPT-style blocks built from torch modules."""
    block = lambda: nn.ModuleList([nn.LayerNorm(width), nn.Linear(width, 3 * width), nn.Linear(width, width),
                                   nn.LayerNorm(width), nn.Linear(width, d_ff), nn.Linear(d_ff, width)])
    return sum(p.numel() for p in nn.ModuleList([block() for _ in range(n_layers)]).parameters())


@pytest.mark.parametrize("max_len", [0, 40])
def test_fusion_costs_match_built_modules(max_len):
    V, d, d_p, n_layers, d_ff, seq = 300, 48, 16, 2, 64, 20
    costs = analysis.fusion_costs(V, d, d_p, max_len, n_layers, d_ff, seq)
    position = "learned" if max_len else "sinusoidal"
    built = {"add": TransformerEmbedding(V, d, position, max_len=max_len or 8),
             "concat": TransformerEmbedding(V, d, position, fusion="concat", d_position=d_p, max_len=max_len or 8),
             "concat_wider": TransformerEmbedding(V, d + d_p, position, fusion="concat", d_position=d_p,
                                                  max_len=max_len or 8)}
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


@pytest.mark.parametrize("kwargs, match", [(dict(d_position=48), r"d_position must be in \(0, d_model=48\)"),
                                           (dict(max_len=-1), "max_len must be >= 0")])
def test_fusion_costs_bad_input(kwargs, match):
    args = dict(vocab_size=10, d_model=48, d_position=8, max_len=4, n_layers=1, d_ff=8, seq_len=4) | kwargs
    with pytest.raises(ValueError, match=match):
        analysis.fusion_costs(**args)


def test_expected_abs_cosine_closed_forms():
    assert math.isclose(analysis.expected_abs_cosine(1), 1.0, rel_tol=1e-12)  # cos = +-1 on a line
    assert math.isclose(analysis.expected_abs_cosine(2), 2 / math.pi, rel_tol=1e-12)  # E|cos(theta)|, theta uniform
    assert math.isclose(analysis.expected_abs_cosine(3), 0.5, rel_tol=1e-12)  # Archimedes: u uniform on [-1, 1]
    d = 4096
    assert math.isclose(analysis.expected_abs_cosine(d), math.sqrt(2 / (math.pi * d)), rel_tol=1 / d)
    with pytest.raises(ValueError, match="d_model"):
        analysis.expected_abs_cosine(0)


@pytest.mark.parametrize("d", [8, 100])
def test_mean_abs_cosine_monte_carlo_matches_closed_form(d, gen):
    random = torch.randn(200_000, d, generator=gen)
    fixed = torch.zeros(d)
    fixed[0] = 1.0
    assert math.isclose(analysis.mean_abs_cosine(random, fixed), analysis.expected_abs_cosine(d), rel_tol=0.01)


def test_mean_abs_cosine_exact_pairs():
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    b = torch.tensor([[0.0, 2.0], [-3.0, 0.0], [1.0, 1.0]])
    assert math.isclose(analysis.mean_abs_cosine(a, b), (0 + 1 + math.sqrt(0.5)) / 3, rel_tol=1e-12)


def reference_lda_accuracy(x, y, k, ridge, n_train, tolerance=0):
    """Bayes rule with the fitted Gaussians, via MultivariateNormal.log_prob (an independent formulation)."""
    x, y = x.double(), y.long()
    xt, yt = x[:n_train], y[:n_train]
    means = torch.stack([xt[yt == c].mean(dim=0) for c in range(k)])
    scatter = sum((xt[yt == c] - means[c]).T @ (xt[yt == c] - means[c]) for c in range(k)) / n_train
    cov = scatter + ridge * torch.trace(scatter) / x.shape[1] * torch.eye(x.shape[1], dtype=x.dtype)
    dist = torch.distributions.MultivariateNormal(means, covariance_matrix=cov)
    predicted = dist.log_prob(x[n_train:, None, :]).argmax(dim=1)
    return ((predicted - y[n_train:]).abs() <= tolerance).double().mean().item()


@pytest.mark.parametrize("tolerance", [0, 1])
def test_lda_probe_equals_gaussian_bayes_rule(gen, tolerance):
    k, d, n = 6, 5, 600
    centres = torch.randn(k, d, generator=gen) * 1.5
    y = torch.randint(0, k, (n,), generator=gen)
    mixing = torch.randn(d, d, generator=gen)
    x = centres[y] + torch.randn(n, d, generator=gen) @ mixing  # correlated noise: LDA must whiten it
    acc = analysis.lda_probe(x, y, k, tolerance=tolerance, ridge=1e-3)
    assert acc == pytest.approx(reference_lda_accuracy(x, y, k, 1e-3, 450, tolerance), abs=1e-12)
    assert 1 / k < acc < 1


def test_lda_predict_returns_the_held_out_rows(gen):
    y = torch.randint(0, 4, (100,), generator=gen)
    x = F.one_hot(y, 4).double() + 0.01 * torch.randn(100, 4, generator=gen, dtype=torch.float64)
    predicted, true = analysis.lda_predict(x, y, 4, train_fraction=0.6)
    assert torch.equal(true, y[60:]) and torch.equal(predicted, y[60:])


def test_lda_probe_separable_and_unrelated_labels(gen):
    y = torch.randint(0, 10, (2000,), generator=gen)
    x = F.one_hot(y, 10).double() + 0.01 * torch.randn(2000, 10, generator=gen, dtype=torch.float64)
    assert analysis.lda_probe(x, y, 10) == 1.0
    unrelated = torch.randint(0, 10, (2000,), generator=gen)
    assert analysis.lda_probe(x, unrelated, 10) < 0.2


@pytest.mark.parametrize("args, match", [
    ((torch.zeros(5, 2), torch.zeros(4, dtype=torch.long), 2), r"features must be \(n, d\)"),
    ((torch.zeros(5, 2), torch.tensor([0, 1, 2, 0, 1]), 2), r"labels must lie in \[0, n_classes=2\)"),
])
def test_lda_probe_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        analysis.lda_probe(*args)
    with pytest.raises(ValueError, match="train_fraction"):
        analysis.lda_probe(torch.zeros(5, 2), torch.zeros(5, dtype=torch.long), 2, train_fraction=1.0)


def test_fusion_probe_concat_keeps_both_and_balance_decides_add():
    torch.manual_seed(0)
    g = lambda: torch.Generator().manual_seed(0)
    concat = TransformerEmbedding(256, 32, fusion="concat", max_len=32).eval()
    assert analysis.fusion_probe(concat, 64, 32, g()) == {"token": 1.0, "position": 1.0, "position_within_1": 1.0}
    # more tokens than dimensions, so the token vectors fill every direction
    balanced = TransformerEmbedding(512, 128, max_len=32).eval()  # unit-RMS tokens, as large as the positions
    buried = TransformerEmbedding(512, 128, max_len=32, init="normal").eval()  # N(0, 1) * sqrt(d): chapter 2
    good, bad = analysis.fusion_probe(balanced, 128, 32, g()), analysis.fusion_probe(buried, 128, 32, g())
    assert good["token"] == bad["token"] == 1.0
    assert good["position"] > 0.5 and good["position_within_1"] > 0.9
    assert bad["position"] < 0.1 and bad["position_within_1"] < 0.2


def test_fusion_probe_refuses_training_mode():
    with pytest.raises(ValueError, match=r"model.eval\(\)"):
        analysis.fusion_probe(TransformerEmbedding(10, 8), 4, 4, torch.Generator())


@pytest.mark.parametrize("layer_norm", [False, True])
def test_added_tables_receive_the_same_gradient(device, gen, layer_norm):
    m = TransformerEmbedding(40, 16, "learned", max_len=12, dropout=0.0, layer_norm=layer_norm).to(device)
    ids = torch.randperm(40, generator=gen)[:10][None].to(device)  # one sequence, distinct ids
    upstream = torch.randn(1, 10, 16, generator=gen).to(device)
    token_grad, position_grad = analysis.fusion_gradients(m, ids, upstream)
    torch.testing.assert_close(token_grad[ids[0]], math.sqrt(16) * position_grad[:10], rtol=1e-5, atol=1e-6)
    assert torch.count_nonzero(position_grad[10:]) == 0 and m.token.weight.grad is None


def test_fusion_gradients_match_closed_forms(gen):
    V, d, d_p, b, s = 30, 12, 4, 3, 7
    ids = torch.randint(0, V, (b, s), generator=gen)  # repeated ids: their gradients add up
    upstream = torch.randn(b, s, d, generator=gen)
    add = TransformerEmbedding(V, d, "learned", max_len=s, dropout=0.0)
    token_grad, position_grad = analysis.fusion_gradients(add, ids, upstream)
    expected = torch.zeros(V, d).index_add_(0, ids.flatten(), upstream.reshape(-1, d)) * math.sqrt(d)
    torch.testing.assert_close(token_grad, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(position_grad, upstream.sum(dim=0), rtol=1e-5, atol=1e-5)
    concat = TransformerEmbedding(V, d, "learned", fusion="concat", d_position=d_p, max_len=s, dropout=0.0)
    token_grad, position_grad = analysis.fusion_gradients(concat, ids, upstream)
    expected = torch.zeros(V, d - d_p).index_add_(0, ids.flatten(), upstream[..., :-d_p].reshape(-1, d - d_p))
    torch.testing.assert_close(token_grad, expected * math.sqrt(d - d_p), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(position_grad, upstream[..., -d_p:].sum(dim=0), rtol=1e-5, atol=1e-5)


def test_fusion_gradients_bad_input():
    with pytest.raises(ValueError, match="position='learned'"):
        analysis.fusion_gradients(TransformerEmbedding(10, 8), torch.zeros(1, 3, dtype=torch.long),
                                  torch.zeros(1, 3, 8))
    with pytest.raises(ValueError, match=r"upstream must have the output's shape \(1, 3, 8\)"):
        analysis.fusion_gradients(TransformerEmbedding(10, 8, "learned"), torch.zeros(1, 3, dtype=torch.long),
                                  torch.zeros(3, 8))


def test_layer_norm_parts_sum_to_layer_norm(device, gen):
    t = torch.randn(2, 5, 16, generator=gen, dtype=torch.float64).to(device) * 4 + 1
    p = torch.randn(5, 16, generator=gen, dtype=torch.float64).to(device)
    tp, pp = analysis.layer_norm_parts(t, p)
    torch.testing.assert_close(tp + pp, F.layer_norm(t + p, (16,)), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(pp.mean(dim=-1), torch.zeros(2, 5, dtype=torch.float64, device=device),
                               rtol=0, atol=1e-12)


def test_scale_balance_exact_vectors():
    t = torch.tensor([[[3.0, 0.0, 0.0, 0.0]]])
    p = torch.tensor([[0.0, 4.0, 0.0, 0.0]])
    r = analysis.scale_balance(t, p)
    assert r == pytest.approx({"fused_norm": 5.0, "token_norm": 3.0, "position_norm": 4.0,
                               "position_share": 4 / 7}, rel=1e-12)


def test_layer_norm_rescales_but_keeps_the_share(gen):
    # zero-mean parts: LayerNorm divides both by the same sigma, so the share is unchanged and the norm is sqrt(d)
    d = 64
    t = torch.randn(3, 8, d, generator=gen, dtype=torch.float64) * 20
    p = torch.randn(8, d, generator=gen, dtype=torch.float64)
    t, p = t - t.mean(-1, keepdim=True), p - p.mean(-1, keepdim=True)
    before, after = analysis.scale_balance(t, p), analysis.scale_balance(t, p, layer_norm=True)
    assert after["position_share"] == pytest.approx(before["position_share"], rel=1e-12)
    assert after["fused_norm"] == pytest.approx(math.sqrt(d), rel=1e-4)
    assert after["fused_norm"] < before["fused_norm"] / 10


def test_binomial_mean_abs_error_closed_forms(gen):
    assert analysis.binomial_mean_abs_error(1, 0.9) == pytest.approx(2 * 0.1, rel=1e-12)  # |1/q - 1| q + p
    assert analysis.binomial_mean_abs_error(5, 1.0) == 0.0
    n, q = 3, 0.7
    brute = sum(math.comb(n, k) * q ** k * (1 - q) ** (n - k) * abs(k / (n * q) - 1) for k in range(n + 1))
    assert analysis.binomial_mean_abs_error(n, q) == pytest.approx(brute, rel=1e-12)
    n = 20000  # normal limit
    assert analysis.binomial_mean_abs_error(n, q) == pytest.approx(math.sqrt(2 * (1 - q) / (math.pi * q * n)),
                                                                   rel=0.01)
    with pytest.raises(ValueError, match="keep in"):
        analysis.binomial_mean_abs_error(3, 0.0)


@pytest.mark.parametrize("start_training", [False, True])
def test_dropout_statistics(start_training):
    torch.manual_seed(0)
    m = TransformerEmbedding(50, 32, dropout=0.25).train(start_training)
    ids = torch.randint(0, 50, (4, 16))
    r = analysis.dropout_statistics(m, ids, 400)
    assert m.training == start_training
    assert r["p"] == 0.25 and r["eval_repeat_change"] == 0.0 and r["train_change"] > 0.1
    assert abs(r["zero_fraction"] - 0.25) < 0.005
    assert r["kept_scale_error"] < 1e-5
    assert r["mean_relative_error"] == pytest.approx(analysis.binomial_mean_abs_error(400, 0.75), rel=0.05)


def test_dropout_statistics_bad_input():
    with pytest.raises(ValueError, match=r"dropout probability must be in \(0, 1\)"):
        analysis.dropout_statistics(TransformerEmbedding(10, 8, dropout=0.0), torch.zeros(1, 2, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="n_samples"):
        analysis.dropout_statistics(TransformerEmbedding(10, 8), torch.zeros(1, 2, dtype=torch.long), 0)


@pytest.mark.parametrize("position", ["sinusoidal", None])
def test_pads_change_real_outputs_unless_masked(device, position):
    torch.manual_seed(0)
    d = 16
    emb = TransformerEmbedding(30, d, position, padding_idx=0).to(device).eval()
    attention = nn.MultiheadAttention(d, 2, batch_first=True).to(device).eval()
    ids = torch.tensor([[5, 7, 3, 9], [2, 2, 8, 1]], device=device)
    r = analysis.pad_influence(emb, attention, ids, 3, pad_id=0)
    # the pad row is zero; with positions added, a pad vector is the position vector, of norm sqrt(d / 2)
    assert r["pad_input_norm"] == pytest.approx(math.sqrt(d / 2) if position else 0.0, abs=1e-5)
    assert r["unmasked"] > 1e-3
    assert r["masked"] < 1e-5


def test_pad_influence_bad_input():
    emb = TransformerEmbedding(30, 8, padding_idx=0).eval()
    attention = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    ids = torch.tensor([[5, 7]])
    with pytest.raises(ValueError, match=r"\.eval\(\)"):
        analysis.pad_influence(emb.train(), attention, ids, 1, 0)
    emb.eval()
    with pytest.raises(ValueError, match="batch_first=True"):
        analysis.pad_influence(emb, nn.MultiheadAttention(8, 2).eval(), ids, 1, 0)
    with pytest.raises(ValueError, match="n_pads"):
        analysis.pad_influence(emb, attention, ids, 0, 0)
    with pytest.raises(ValueError, match="contain the pad id 0"):
        analysis.pad_influence(emb, attention, torch.tensor([[5, 0]]), 1, 0)


def test_vocabulary_parameters_match_built_tables():
    sizes = {"en": 300, "zh": 500, "fr": 200}
    r = analysis.vocabulary_parameters(8, 700, list(sizes.values()))
    assert r["shared"] == TokenEmbedding(700, 8).weight.numel()
    assert r["separate"] == sum(p.numel() for p in MultilingualEmbedding(sizes, 8).parameters())
    with pytest.raises(ValueError, match="must be positive"):
        analysis.vocabulary_parameters(8, 700, [])


def test_xlmr_base_token_table():
    assert analysis.parameter_count(analysis.XLMR_BASE)["token"] == 250002 * 768
