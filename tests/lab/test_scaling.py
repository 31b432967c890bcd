"""Chapter 2 measurements (course_embed.lab.scaling) against closed forms."""

import io
import math

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch
import torch.nn.functional as F
from matplotlib.patches import Rectangle
from torch import nn

import course_embed as ce
from course_embed.lab import scaling, token_embedding

INITS = ("normal", "xavier_uniform", "scaled_normal")


# --- norms --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("init", INITS)
@pytest.mark.parametrize("scale", [False, True])
def test_expected_token_norm_matches_a_measured_table(init, scale, device):
    torch.manual_seed(0)
    V, d = 4000, 256
    emb = ce.TokenEmbedding(V, d, scale=scale, init=init).to(device)
    out = emb(torch.arange(V, device=device))  # (V, d): every token's vector
    measured = out.detach().double().pow(2).sum(-1).mean().sqrt().item()
    assert measured == pytest.approx(scaling.expected_token_norm(init, V, d, scale), rel=0.01)


def test_expected_token_norm_closed_forms():
    V, d = 10000, 512
    assert scaling.expected_token_norm("normal", V, d, False) == pytest.approx(math.sqrt(d), rel=1e-12)
    assert scaling.expected_token_norm("normal", V, d, True) == pytest.approx(d, rel=1e-12)
    assert scaling.expected_token_norm("scaled_normal", V, d, False) == pytest.approx(1.0, rel=1e-12)
    assert scaling.expected_token_norm("scaled_normal", V, d, True) == pytest.approx(math.sqrt(d), rel=1e-12)
    assert scaling.expected_token_norm("xavier_uniform", V, d, True) == pytest.approx(
        math.sqrt(6 / (V + d)) / math.sqrt(3) * d, rel=1e-12
    )


@pytest.mark.parametrize("d", [2, 64, 512, 1000])
def test_sinusoidal_norm_is_every_rows_norm(d):
    table = ce.sinusoidal_table(300, d, dtype=torch.float64)
    norms = token_embedding.row_norms(table)
    torch.testing.assert_close(norms, torch.full_like(norms, scaling.sinusoidal_norm(d)), rtol=1e-12, atol=0)


@pytest.mark.parametrize("d", [0, 7])
def test_sinusoidal_norm_rejects_odd_width(d):
    with pytest.raises(ValueError, match="positive even number"):
        scaling.sinusoidal_norm(d)


@pytest.mark.parametrize("d", [64, 512, 4096])
def test_ratio_is_sqrt_2d_for_standard_normal_and_sqrt2_for_scaled(d):
    assert scaling.token_to_position_ratio("normal", 1000, d, True) == pytest.approx(math.sqrt(2 * d), rel=1e-12)
    assert scaling.token_to_position_ratio("scaled_normal", 1000, d, True) == pytest.approx(math.sqrt(2), rel=1e-12)
    assert scaling.token_to_position_ratio("normal", 1000, d, False) == pytest.approx(math.sqrt(2), rel=1e-12)


def test_ratio_is_32_at_d_512():
    assert scaling.token_to_position_ratio("normal", 10000, 512, True) == pytest.approx(32.0, rel=1e-12)


@pytest.mark.parametrize("scale", [False, True])
def test_output_row_norms_are_the_norms_of_the_outputs(scale, device):
    emb = ce.TokenEmbedding(50, 16, scale=scale, init="normal", padding_idx=0).to(device)
    expected = emb(torch.arange(50, device=device)).detach().double().norm(dim=-1)
    norms = scaling.output_row_norms(emb)
    assert norms.dtype == torch.float64 and norms.shape == (50,) and norms[0] == 0
    torch.testing.assert_close(norms, expected, rtol=1e-6, atol=1e-9)


def test_output_row_norms_of_nn_embedding_has_no_multiplier():
    emb = nn.Embedding(20, 8)
    torch.testing.assert_close(scaling.output_row_norms(emb), emb.weight.detach().double().norm(dim=-1))


def test_rms():
    assert scaling.rms(torch.tensor([3.0, -4.0])) == pytest.approx(math.sqrt(12.5), rel=1e-12)
    assert scaling.rms(torch.full((2, 3), -2.0, dtype=torch.float16)) == 2.0
    with pytest.raises(ValueError, match="empty"):
        scaling.rms(torch.empty(0))


# --- tied logits --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("init", INITS)
def test_tied_logit_std_matches_measured_logits(init, device, gen):
    torch.manual_seed(0)
    V, d = 3000, 256
    emb = ce.TokenEmbedding(V, d, init=init).to(device)
    head = ce.tie_weights(emb, nn.Linear(d, V, bias=False))
    hidden = F.layer_norm(torch.randn(64, d, generator=gen), (d,)).to(device)  # unit RMS rows
    targets = torch.randint(0, V, (64,), generator=gen).to(device)
    stats = scaling.logit_stats(hidden, head.weight, targets)
    assert stats.std == pytest.approx(scaling.tied_logit_std(init, V, d), rel=0.03)
    assert scaling.tied_logit_std(init, V, d) == pytest.approx(token_embedding.init_std(init, V, d) * math.sqrt(d))


def test_logit_stats_of_a_zero_weight_is_a_uniform_guess(gen):
    V, d = 100, 8
    hidden = torch.randn(2, 5, d, generator=gen)
    stats = scaling.logit_stats(hidden, torch.zeros(V, d), torch.randint(0, V, (2, 5), generator=gen))
    assert stats.std == 0
    assert stats.loss == pytest.approx(math.log(V), rel=1e-12)
    assert stats.top_probability == pytest.approx(1 / V, rel=1e-12)


def test_logit_stats_against_torch_cross_entropy(gen):
    hidden, weight = torch.randn(7, 4, generator=gen), torch.randn(11, 4, generator=gen)
    targets = torch.randint(0, 11, (7,), generator=gen)
    logits = hidden.double() @ weight.double().T
    loss = F.cross_entropy(logits, targets).item()
    top = (logits.exp() / logits.exp().sum(-1, keepdim=True)).max(-1).values.mean().item()
    stats = scaling.logit_stats(hidden, weight, targets)
    assert stats.loss == pytest.approx(loss, rel=1e-10)
    assert stats.top_probability == pytest.approx(top, rel=1e-10)
    assert stats.std == pytest.approx(logits.flatten().std().item(), rel=1e-10)


def test_unit_scale_logits_cost_log_v_plus_half(gen):
    # Gaussian logits of std s on a random target cost about log V + s^2 / 2 (lognormal mean), here s = 1
    V, d = 20000, 64
    weight = torch.randn(V, d, generator=gen) * d**-0.5
    hidden = F.layer_norm(torch.randn(200, d, generator=gen), (d,))
    targets = torch.randint(0, V, (200,), generator=gen)
    stats = scaling.logit_stats(hidden, weight, targets)
    target_logit = (hidden.double() * weight[targets].double()).sum(-1).mean().item()  # ~N(0, 1/200), removed
    assert stats.loss + target_logit == pytest.approx(math.log(V) + 0.5, abs=0.03)


def test_logit_stats_shape_errors():
    with pytest.raises(ValueError, match="width"):
        scaling.logit_stats(torch.zeros(3, 4), torch.zeros(10, 5), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="targets must have shape"):
        scaling.logit_stats(torch.zeros(3, 4), torch.zeros(10, 4), torch.zeros(2, dtype=torch.long))


# --- reading position and token back -----------------------------------------------------------------------


def _tokens(init, scale, d=128, V=2000):
    torch.manual_seed(0)
    emb = ce.TokenEmbedding(V, d, scale=scale, init=init)
    return (emb.weight * emb.multiplier).detach()


def test_read_back_equals_an_independent_nearest_mean_by_distance():
    # same ids (same seed), then the nearest true mean by Euclidean distance (torch.cdist)
    s, d, n, V = 16, 32, 20, 300
    tokens, pe = _tokens("normal", False, d=d, V=V).double(), ce.sinusoidal_table(s, d).double()
    ids = torch.randint(0, V, (n, s), generator=torch.Generator().manual_seed(5))
    x = (tokens[ids] + pe).reshape(-1, d)
    position = torch.cdist(x, pe + tokens.mean(0)).argmin(-1)
    token = torch.cdist(x, tokens + pe.mean(0)).argmin(-1)
    where = torch.arange(s).repeat(n)
    result = scaling.read_back(tokens, pe, n, torch.Generator().manual_seed(5))
    assert result.position_accuracy == pytest.approx((position == where).double().mean().item(), abs=1e-12)
    assert result.position_abs_error == pytest.approx((position - where).abs().double().mean().item(), abs=1e-12)
    assert result.token_accuracy == pytest.approx((token == ids.flatten()).double().mean().item(), abs=1e-12)
    assert (result.position_chance, result.token_chance) == (1 / s, 1 / V)


def test_read_back_trade_off_between_position_and_token():
    pe = ce.sinusoidal_table(32, 128)
    buried = scaling.read_back(_tokens("normal", True), pe, 32, torch.Generator().manual_seed(0))
    assert buried.position_accuracy < 3 * buried.position_chance and buried.token_accuracy == 1.0
    drowned = scaling.read_back(_tokens("scaled_normal", False), pe, 32, torch.Generator().manual_seed(0))
    assert drowned.position_accuracy == 1.0 and drowned.token_accuracy < 0.5
    balanced = scaling.read_back(_tokens("scaled_normal", True), pe, 32, torch.Generator().manual_seed(0))
    assert balanced.position_accuracy > 0.5 and balanced.token_accuracy > 0.99


def test_read_back_is_deterministic_and_device_independent(device):
    tokens, pe = _tokens("scaled_normal", True), ce.sinusoidal_table(32, 128)
    a = scaling.read_back(tokens, pe, 8, torch.Generator().manual_seed(3))
    b = scaling.read_back(tokens.to(device), pe.to(device), 8, torch.Generator().manual_seed(3))
    assert a == b


def test_read_back_bad_input():
    pe = ce.sinusoidal_table(8, 16)
    with pytest.raises(ValueError, match=r"tokens must be \(v, d\)"):
        scaling.read_back(torch.zeros(10, 12), pe, 2, torch.Generator())
    with pytest.raises(ValueError, match="sequences must be a positive"):
        scaling.read_back(torch.zeros(10, 16), pe, 0, torch.Generator())


# --- dtypes -------------------------------------------------------------------------------------------------------


def test_dtype_functions_reject_integer_dtypes():
    for fn in (scaling.underflow_fraction, scaling.position_rounding_error):
        with pytest.raises(TypeError, match="floating-point torch.dtype"):
            fn(torch.ones(3), torch.ones(3), torch.int32) if fn is scaling.position_rounding_error else fn(
                torch.ones(3), torch.int32
            )


@pytest.mark.parametrize("dtype, mantissa_bits", [(torch.bfloat16, 7), (torch.float16, 10)])
def test_position_rounding_error_is_the_rounding_noise_of_the_sum(dtype, mantissa_bits, gen, device):
    # tokens with every |entry| in [17, 30] and positions uniform in [-1, 1]: the sum stays in [16, 32), where the
    # rounding step is 16 * 2^-m, so the error is uniform with RMS step / sqrt(12), against the positions' 1 / sqrt(3)
    s, d = 64, 256
    signs = torch.randint(0, 2, (8, s, d), generator=gen) * 2 - 1
    tokens = (signs * (18 + 11 * torch.rand(8, s, d, generator=gen))).to(device)
    positions = (2 * torch.rand(s, d, generator=gen) - 1).to(device)
    step = 16 * 2.0**-mantissa_bits
    expected = step / math.sqrt(12) * math.sqrt(3)
    assert scaling.position_rounding_error(tokens, positions, dtype) == pytest.approx(expected, rel=0.03)


def test_position_rounding_error_grows_with_the_tokens_and_vanishes_in_float64(gen):
    pe = ce.sinusoidal_table(32, 64)
    base = torch.randn(4, 32, 64, generator=gen)
    errors = [scaling.position_rounding_error(base * k, pe, torch.bfloat16) for k in (0.05, 1, 22.6)]
    assert errors[0] < errors[1] < errors[2]
    assert scaling.position_rounding_error(base * 22.6, pe, torch.float64) < 1e-14


def test_underflow_fraction():
    x = torch.tensor([1e-9, 1e-3, 0.0, -1e-10])
    assert scaling.underflow_fraction(x, torch.float16) == pytest.approx(2 / 3)
    assert scaling.underflow_fraction(x, torch.bfloat16) == 0
    with pytest.raises(ValueError, match="no non-zero"):
        scaling.underflow_fraction(torch.zeros(3), torch.float16)


# --- figures ----------------------------------------------------------------------------------------------


NORMS = {"normal": (22.6, 512.0), "xavier_uniform": (0.31, 7.06), "scaled_normal": (1.0, 22.6)}


@pytest.fixture(autouse=True)
def no_show_and_close(monkeypatch):
    """Figures are returned, never shown; close them after each test."""

    def show(*args, **kwargs):
        raise AssertionError("plots functions must not call plt.show()")

    monkeypatch.setattr(plt, "show", show)
    yield
    plt.close("all")


def _bars(ax):
    return [p for p in ax.patches if isinstance(p, Rectangle)]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def test_row_norm_bars_show_the_given_norms_and_the_position_line():
    fig = scaling.plot_row_norms(NORMS, 16.0, 512)
    assert isinstance(fig, matplotlib.figure.Figure)
    ax = fig.axes[0]
    heights = sorted(round(b.get_height(), 6) for b in _bars(ax))
    assert heights == sorted(v for pair in NORMS.values() for v in pair)
    assert ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == list(NORMS)
    hlines = [line for line in ax.get_lines() if list(line.get_ydata()) == [16.0, 16.0]]
    assert len(hlines) == 1
    assert _png(fig).startswith(b"\x89PNG")


@pytest.mark.parametrize(
    "norms, match", [({}, "empty"), ({"normal": (1.0,)}, "pair"), ({"normal": (0.0, 1.0)}, "positive")]
)
def test_row_norm_bars_bad_input(norms, match):
    with pytest.raises(ValueError, match=match):
        scaling.plot_row_norms(norms, 16.0, 512)


def test_norm_ratio_lines_follow_the_data():
    d_models = [64, 256, 1024]
    ratios = {"normal": [11.3, 22.6, 45.3], "scaled_normal": [1.41, 1.41, 1.41]}
    fig = scaling.plot_norm_ratio(d_models, ratios)
    ax = fig.axes[0]
    data = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}
    for label, values in ratios.items():
        assert data[label] == (d_models, values)
    assert list(data["equal norms"][1]) == [1.0, 1.0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert _png(fig).startswith(b"\x89PNG")


@pytest.mark.parametrize(
    "d_models, ratios, match",
    [
        ([64, 128], {"a": [1.0]}, "1 values for 2 widths"),
        ([], {"a": []}, "d_models must hold at least one value"),
        ([64], {}, "ratios is empty"),
        ([64], {"a": [-1.0]}, "positive"),
    ],
)
def test_norm_ratio_bad_input(d_models, ratios, match):
    with pytest.raises(ValueError, match=match):
        scaling.plot_norm_ratio(d_models, ratios)


def test_read_back_bars_show_both_accuracies_and_chance():
    labels, position, token = ["a", "b"], [1.0, 0.02], [0.3, 1.0]
    fig = scaling.plot_read_back(labels, position, token, 1 / 64)
    ax = fig.axes[0]
    assert sorted(round(b.get_width(), 6) for b in _bars(ax)) == sorted(position + token)
    assert [t.get_text() for t in ax.get_yticklabels()] == labels
    assert len([line for line in ax.get_lines() if list(line.get_xdata()) == [1 / 64, 1 / 64]]) == 1
    assert _png(fig).startswith(b"\x89PNG")


@pytest.mark.parametrize(
    "labels, position, token, match",
    [
        (["a"], [0.5, 0.6], [0.1, 0.2], "equal lengths"),
        (["a"], [1.5], [0.1], r"\[0, 1\]"),
        ([], [], [], "position must hold at least one value"),
    ],
)
def test_read_back_bars_bad_input(labels, position, token, match):
    with pytest.raises(ValueError, match=match):
        scaling.plot_read_back(labels, position, token, 0.1)


def test_sum_heatmaps_show_the_given_values():
    sums = {"a": torch.randn(8, 6, generator=torch.Generator().manual_seed(0)), "b": torch.ones(8, 6)}
    fig = scaling.plot_sums(sums)
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 2
    torch.testing.assert_close(torch.tensor(images[0].get_array().data), sums["a"].double())
    assert images[0].get_clim() == (-sums["a"].abs().max().item(), sums["a"].abs().max().item())
    with pytest.raises(ValueError, match="empty"):
        scaling.plot_sums({})
    with pytest.raises(ValueError, match=r"must be \(s, d\)"):
        scaling.plot_sums({"a": torch.ones(3)})


def test_training_curves_show_the_mean_and_the_spread():
    curves = {"a": [[4.0, 2.0, 1.0], [4.0, 3.0, 2.0]], "b": [[4.0, 4.0, 4.0]]}
    fig = scaling.plot_training(curves, 10, 3.0)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["a"].get_xdata()) == [0, 10, 20]
    assert list(lines["a"].get_ydata()) == [4.0, 2.5, 1.5]
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "training step"
    assert len(ax.collections) == 2  # one min-max band per setting
    with pytest.raises(ValueError, match="equal length"):
        scaling.plot_training({"a": [[1.0], [1.0, 2.0]]}, 10, 3.0)
    with pytest.raises(ValueError, match="empty"):
        scaling.plot_training({}, 10, 3.0)


def test_training_panels_draw_each_group_in_its_own_panel():
    panels = {"left": (100, {"a": [[4.0, 2.0], [4.0, 3.0]]}), "right": (25, {"b": [[4.0, 4.0]], "c": [[3.0, 1.0]]})}
    fig = scaling.plot_training_panels(panels, 3.0)
    assert [ax.get_title() for ax in fig.axes] == ["left", "right"]
    labels = [[line.get_label() for line in ax.get_lines()] for ax in fig.axes]
    assert labels == [["a", "uniform guess, log V"], ["b", "c", "uniform guess, log V"]]
    assert list(fig.axes[0].get_lines()[0].get_ydata()) == [4.0, 2.5]
    assert list(fig.axes[1].get_lines()[0].get_xdata()) == [0, 25]
    assert fig.axes[0].get_ylabel() == "held-out cross-entropy"
    with pytest.raises(ValueError, match="non-empty"):
        scaling.plot_training_panels({"left": (100, {})}, 3.0)
