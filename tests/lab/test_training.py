"""The tiny-model ensemble (course_embed.lab.training) against stand-alone plain-torch models."""

import math

import pytest
import torch
from matplotlib.figure import Figure

from course_embed import TransformerEmbedding
from course_embed.lab import training as tr

V, L, N_OUT = 20, 7, 9


def reference(params, spec, ids):
    """One member as a stand-alone model: the package's input layer, then attention and MLP in plain torch."""
    d, (_, d_p) = spec.d_model, spec.widths
    position = {"add": "learned", "concat": "learned", "none": None}[spec.fusion]
    embed = TransformerEmbedding(
        V,
        d,
        position=position,
        fusion="add" if spec.fusion == "none" else spec.fusion,
        dropout=0.0,
        max_len=L,
        d_position=d_p or None,
        layer_norm=spec.layer_norm,
    )
    state = {"token.weight": params["token"]}
    if d_p:
        state["positions.weight"] = params["position"]
    if spec.layer_norm:
        state |= {"norm.weight": torch.ones(d), "norm.bias": torch.zeros(d)}
    embed.load_state_dict(state)
    if spec.layer_norm and spec.input_scale != 1:  # the scale sits between the sum and the LayerNorm
        embed.norm, norm = torch.nn.Identity(), embed.norm
        x = norm(embed(ids) * spec.input_scale)
    else:
        x = embed(ids) * spec.input_scale  # (b, s, d)
    if spec.rms_norm:  # divide by the root mean square, no centring
        x = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    scores = (x @ params["wq"]) @ (x @ params["wk"]).transpose(-2, -1) / math.sqrt(d)
    if spec.causal:
        scores = scores.masked_fill(torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool).triu(1), -math.inf)
    x = x + (scores.softmax(-1) @ (x @ params["wv"])) @ params["wo"]
    x = x + torch.relu(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]
    return x @ params["wout"] + params["bout"]


SPECS = [
    tr.Spec("add", 8, seed=0),
    tr.Spec("concat", 12, layer_norm=True, seed=1),
    tr.Spec("concat", 6, d_position=2, seed=2),
    tr.Spec("none", 10, causal=True, seed=3),
    tr.Spec("add", 4, layer_norm=True, causal=True, seed=4),
    tr.Spec("add", 6, seed=5, input_scale=0.5**0.5),
    tr.Spec("concat", 8, layer_norm=True, seed=6, input_scale=3.0),
    tr.Spec("add", 6, rms_norm=True, seed=7),
    tr.Spec("concat", 10, rms_norm=True, seed=8, input_scale=2.0),
]


def test_every_member_computes_what_a_stand_alone_model_computes(gen):
    model = tr.TinyEnsemble(SPECS, V, L, N_OUT)
    ids = torch.randint(0, V, (len(SPECS), 3, L), generator=gen)
    with torch.no_grad():  # perturb every used parameter, so that zero biases cannot hide a bug
        a, h = model.active, model.hidden_mask  # (E, D), (E, H)
        used = {
            "token": model.token_mask[:, None],
            "position": model.position_mask[:, None],
            "w1": a[:, :, None] * h[:, None],
            "b1": h,
            "w2": h[:, :, None] * a[:, None],
            "b2": a,
            "wout": a[:, :, None],
            "bout": torch.ones(1),
        } | {w: a[:, :, None] * a[:, None] for w in ("wq", "wk", "wv", "wo")}
        for name, p in model.named_parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen) * used[name])
    out = model(ids)
    for e, spec in enumerate(SPECS):
        torch.testing.assert_close(out[e], reference(model.member(e), spec, ids[e]), rtol=1e-5, atol=1e-5)


def test_unused_coordinates_get_no_gradient_and_members_are_independent(gen):
    model = tr.TinyEnsemble(SPECS, V, L, N_OUT)
    ids = torch.randint(0, V, (len(SPECS), 3, L), generator=gen)
    model(ids)[1].sum().backward()  # the loss of member 1 only
    for name, p in model.named_parameters():
        others = torch.cat([p.grad[:1], p.grad[2:]])
        assert others.abs().max() == 0, name
    assert model.token.grad[1, :, 6:].abs().max() == 0  # member 1's token is 6 wide (concat 12, half position)
    assert model.position.grad[1, :, :6].abs().max() == 0 and model.position.grad[1, :, 6:].abs().max() > 0


def test_members_start_from_their_own_seed():
    a = tr.TinyEnsemble([tr.Spec("add", 8, seed=5)], V, L, N_OUT).member(0)
    b = tr.TinyEnsemble([tr.Spec("concat", 16, seed=0), tr.Spec("add", 8, seed=5)], V, L, N_OUT).member(1)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert a["token"].std().item() == pytest.approx(8**-0.5, rel=0.15)  # N(0, 1/d), x sqrt(d) later
    assert a["position"].std().item() == pytest.approx(1.0, rel=0.15)


@pytest.mark.parametrize("spec", SPECS)
def test_parameter_count_matches_the_members_tensors(spec):
    member = tr.TinyEnsemble([spec], V, L, N_OUT).member(0)
    assert tr.parameter_count(spec, V, L, N_OUT) == sum(t.numel() for t in member.values())


def test_matched_concat_width_is_the_closest_count():
    d = 16
    width = tr.matched_concat_width(d, 64, 16, 64)
    target = tr.parameter_count(tr.Spec("add", d), 64, 16, 64)

    def gap(w):
        return abs(tr.parameter_count(tr.Spec("concat", w), 64, 16, 64) - target)

    assert all(gap(width) <= gap(w) for w in range(d, 4 * d + 1, 2))
    assert width == 18


def test_tasks():
    g = torch.Generator().manual_seed(0)
    ids, targets = tr.reverse_task(5, 6)(4, 0, g)
    assert ids.shape == (4, 6) and torch.equal(targets[:, 0], ids[:, -1]) and torch.equal(targets, ids.flip(1))
    ids, targets = tr.position_task(5, 6)(4, 0, g)
    assert (ids[:, 0] == 0).all() and (ids[:, 1:] > 0).all()
    assert torch.equal(targets, torch.arange(6).expand(4, 6))
    ids, targets = tr.position_task(5, 6, start_token=False)(400, 0, g)
    assert (ids > 0).all() and set(ids[:, 0].tolist()) == {1, 2, 3, 4}  # the first token is as random as the rest
    assert torch.equal(targets, torch.arange(6).expand(400, 6))


def test_panels_take_one_chance_level_or_one_per_panel():
    steps, accuracy = torch.tensor([1, 2]), torch.rand(2, 4)
    panels = {"a": {"x": [0, 1]}, "b": {"y": [2, 3]}}
    fig = tr.plot_training_panels(steps, accuracy, panels, chance=[0.5, 0.25])
    levels = [[line.get_ydata()[0] for line in ax.lines if line.get_label() == "chance"] for ax in fig.axes]
    assert levels == [[0.5], [0.25]]
    fig = tr.plot_training_panels(steps, accuracy, panels, chance=0.1)
    assert [[line.get_ydata()[0] for line in ax.lines if line.get_label() == "chance"] for ax in fig.axes] == [
        [0.1],
        [0.1],
    ]
    with pytest.raises(ValueError, match="one per panel"):
        tr.plot_training_panels(steps, accuracy, panels, chance=[0.5])
    fig = tr.plot_training_panels(steps, accuracy, panels, chance=[0.5, {"chance": 0.25, "floor": 0.4}])
    right = {
        line.get_label(): line.get_ydata()[0] for line in fig.axes[1].lines if line.get_label() in ("chance", "floor")
    }
    assert right == {"chance": 0.25, "floor": 0.4}


def test_training_learns_is_deterministic_and_restores_threads():
    threads = torch.get_num_threads()
    specs = [tr.Spec("add", 8, seed=0), tr.Spec("none", 8, causal=True, seed=0), tr.Spec("none", 8, seed=0)]
    runs = [tr.train(tr.TinyEnsemble(specs, 6, 4, 4), tr.position_task(6, 4), 60, eval_every=20) for _ in range(2)]
    assert torch.get_num_threads() == threads
    assert torch.equal(runs[0]["accuracy"], runs[1]["accuracy"])
    assert runs[0]["steps"].tolist() == [20, 40, 60]
    learned, causal, bidirectional = runs[0]["accuracy"][-1].tolist()
    assert learned > 0.9  # a position table names the position
    # without positions only the causal mask tells positions apart; bidirectional attention is stuck at the
    # chance level of 1/4 + 3/4 * 1/3 (the start token gives position 0 away)
    assert causal > bidirectional + 0.1 and bidirectional <= 0.55


def test_shared_batches_give_members_of_one_seed_the_same_data():
    specs = [tr.Spec("add", 8, seed=0), tr.Spec("concat", 8, seed=0), tr.Spec("add", 8, seed=1)]
    task = tr.reverse_task(6, 4)
    gens = {s: torch.Generator().manual_seed(1000 + s) for s in (0, 1)}
    ids, _ = tr._batches(specs, task, 5, 1, gens, shared=True)
    assert torch.equal(ids[0], ids[1]) and not torch.equal(ids[0], ids[2])
    alone = tr.train(tr.TinyEnsemble(specs[:1], 6, 4, 6), task, 20, eval_every=10, shared_batches=True)
    together = tr.train(tr.TinyEnsemble(specs, 6, 4, 6), task, 20, eval_every=10, shared_batches=True)
    # with shared batches a member trains exactly as it would alone
    torch.testing.assert_close(alone["accuracy"][:, 0], together["accuracy"][:, 0])


def test_evaluate_counts_every_position():
    model = tr.TinyEnsemble([tr.Spec("add", 4)], 3, 2, 3)
    ids = torch.zeros(1, 5, 2, dtype=torch.long)
    predicted = model(ids).argmax(-1)
    assert tr.evaluate(model, ids, predicted).item() == 1.0
    assert tr.evaluate(model, ids, (predicted + 1) % 3).item() == 0.0


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: tr.Spec("sum", 8), "fusion must be one of"),
        (lambda: tr.Spec("concat", 8, d_position=8), r"d_position must be in \(0, d_model=8\)"),
        (lambda: tr.Spec("add", 8, input_scale=0.0), "input_scale must be > 0"),
        (lambda: tr.Spec("add", 8, layer_norm=True, rms_norm=True), "not both"),
        (lambda: tr.TinyEnsemble([], V, L, N_OUT), "at least one Spec"),
        (lambda: tr.TinyEnsemble(SPECS[:2], V, L, N_OUT)(torch.zeros(3, 1, 2, dtype=torch.long)), "members=2"),
        (lambda: tr.train(tr.TinyEnsemble(SPECS[:1], V, L, N_OUT), tr.reverse_task(V, L), 0), "steps"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_plot_training_draws_mean_and_band():
    steps = torch.tensor([10, 20])
    acc = torch.tensor([[0.1, 0.3, 0.5], [0.6, 0.8, 1.0]], dtype=torch.float64)
    fig = tr.plot_training(steps, acc, {"a": [0, 1], "b": [2]}, chance=0.25, title="t")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert ax.lines[0].get_ydata().tolist() == pytest.approx([0.2, 0.7])
    assert ax.lines[1].get_ydata().tolist() == pytest.approx([0.5, 1.0])
    assert ax.get_xlabel() == "training step" and ax.get_ylabel() == "held-out accuracy"


def test_plot_training_panels_draws_each_group_in_its_panel():
    steps = torch.tensor([10, 20])
    acc = torch.tensor([[0.1, 0.3, 0.5, 0.0], [0.6, 0.8, 1.0, 0.2]], dtype=torch.float64)
    panels = {"left": {"a": [0, 1]}, "right": {"b": [2], "c": [3]}}
    fig = tr.plot_training_panels(steps, acc, panels, chance=0.25, title="t")
    left, right = fig.axes
    assert left.get_title() == "left" and right.get_title() == "right"
    assert left.lines[0].get_ydata().tolist() == pytest.approx([0.2, 0.7])
    assert right.lines[1].get_ydata().tolist() == pytest.approx([0.0, 0.2])
    assert [t.get_text() for t in right.get_legend().get_texts()] == ["b (1 seeds)", "c (1 seeds)", "chance"]
    assert left.get_ylabel() == "held-out accuracy"
