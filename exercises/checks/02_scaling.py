"""Public tests of exercise 02 (what `grader.check` runs). Format: course_embed/tools/grading/probe.py.

The inputs are fixed here, and each expected value is stored."""

import math

import torch

from course_embed.tools.grading.probe import as_tensor, run, test

#: expected_norm_ratio for fixed arguments, computed once from the closed form and stored.
RATIOS = [
    (("scaled_normal", 1000, 64, True), 1.4142135623730951, "N(0, 1/d) has sigma = d ** -0.5"),
    (("normal", 1000, 64, False), 1.4142135623730951, "N(0, 1) has sigma = 1, and no sqrt(d) factor here"),
    (("xavier_uniform", 1000, 64, True), 0.4905114715879726, "U(-a, a) has sigma = a / sqrt(3), not a"),
    (("xavier_uniform", 30522, 768, False), 0.011306474669281657, "U(-a, a) has sigma = a / sqrt(3), not a"),
]


@test("q1", points=1)
def ratio_for_each_init(expected_norm_ratio):
    got = yield [run(expected_norm_ratio, *args[:3], scale=args[3]) for args, _, _ in RATIOS] + [
        run(expected_norm_ratio, "uniform", 1000, 64),
        run(expected_norm_ratio, "normal", 1000, 63),
    ]
    for (args, expected, hint), out in zip(RATIOS, got):
        label = f"expected_norm_ratio({args[0]!r}, {args[1]}, {args[2]}, scale={args[3]})"
        value = out.number(label)
        assert math.isclose(value, expected, rel_tol=1e-6), (
            f"{label} is {value:.6g}, expected {expected:.6g}: the token's RMS norm is sigma * sqrt(d) (times sqrt(d) "
            f"with the scale), a PE row's norm is sqrt(d / 2) (d / 2 pairs with sin^2 + cos^2 = 1); {hint} "
            f"(grading also tries other sizes)"
        )
    got[4].raises("expected_norm_ratio('uniform', 1000, 64) (an unknown init)", ValueError)
    got[5].raises("expected_norm_ratio('normal', 1000, 63) (an odd d_model: no sinusoidal table)", ValueError)


#: A known (11, 4) table that the gathering loads into the embedding before tying.
TABLE = torch.arange(44, dtype=torch.float32).reshape(11, 4) / 4 - 5


def _tie_probe(tie):
    emb, out = torch.nn.Embedding(11, 4), torch.nn.Linear(4, 11, bias=False)
    with torch.no_grad():
        emb.weight.copy_(TABLE)
    returned = tie(emb, out)
    if returned is not out:
        return {"is_output": False}
    before = returned(torch.eye(4))  # (4, 11): the tied layer's weight, transposed
    with torch.no_grad():
        emb.weight.mul_(-1.0)  # a change to the embedding's table...
    after = returned(torch.eye(4))  # ...is a change to the output layer's
    return {"is_output": True, "before": before, "after": after}


#: The embedding's gradient after one step through both uses of TABLE (ids 2 and 5 looked up, the tied layer's
#: logits summed): every row gets TABLE[2] + TABLE[5] from the output layer; rows 2 and 5 get TABLE.sum(0) more.
GRAD_ROW_0, GRAD_ROW_2 = [-3.0, -2.5, -2.0, -1.5], [-3.0, 0.25, 3.5, 6.75]


def _tie_grad(tie):
    emb, out = torch.nn.Embedding(11, 4), torch.nn.Linear(4, 11, bias=False)
    with torch.no_grad():
        emb.weight.copy_(TABLE)
    returned = tie(emb, out)
    returned(emb(torch.tensor([2, 5]))).sum().backward()
    return emb.weight.grad


def _wrong_way(tie):
    return tie(torch.nn.Embedding(11, 4), torch.nn.Linear(11, 4))


@test("q2", points=1)
def tie_shares_the_parameter_and_refuses_a_wrong_layer(tie):
    got = yield [run(_tie_probe, tie), run(_wrong_way, tie), run(_tie_grad, tie)]
    label = "tie(nn.Embedding(11, 4), nn.Linear(4, 11))"
    r = got[0].ok(f"{label}, then calling the layer it returns (return the output layer)")
    assert r["is_output"], (
        f"{label} returned another layer: return the output layer you were given, its weight now the embedding's "
        f"table (a new layer would drop output's bias and any hooks on it)"
    )
    before = as_tensor(r["before"], "the returned layer's output")
    assert before.shape == (4, 11) and torch.equal(before, TABLE.T), (
        f"{label}: the returned layer does not compute with the embedding's table (set output.weight to it)"
    )
    assert torch.equal(as_tensor(r["after"], "the returned layer's output"), -TABLE.T), (
        f"{label}: after the embedding's table changed, the output layer still used the old values: it holds a "
        f"copy; assign the Parameter itself (output.weight = embedding.weight)"
    )
    grad = got[2].tensor(f"{label}: the embedding's gradient after a step through both", shape=(11, 4))
    assert not torch.all(grad[0] == 0), (
        f"{label}: the embedding's gradient has nothing from the output layer (row 0, never looked up, got 0): the "
        f"two layers hold two Parameters that share their values (.data), so each gets its own gradient; assign "
        f"the Parameter itself (output.weight = embedding.weight)"
    )
    assert torch.allclose(grad[0], torch.tensor(GRAD_ROW_0)) and torch.allclose(grad[2], torch.tensor(GRAD_ROW_2)), (
        f"{label}: the embedding's gradient must be the sum over both uses (row 0: {GRAD_ROW_0}, row 2: "
        f"{GRAD_ROW_2}), got {grad[0].tolist()} and {grad[2].tolist()}"
    )
    message = got[1].raises("tie(nn.Embedding(11, 4), nn.Linear(11, 4)) (weight (4, 11): the wrong way round)",
                            ValueError)
    assert "11, 4" in message and "4, 11" in message, (
        f"the ValueError of tie(nn.Embedding(11, 4), nn.Linear(11, 4)) must name both shapes, (11, 4) and (4, 11): "
        f"got {message!r}"
    )


@test("q3", points=1)
def measured_ratio_for_seed_1(measured_ratio):
    got = yield run(measured_ratio, 1)
    value = got.number("measured_ratio(1)")
    assert abs(value - 32.02605) <= 0.00051, (
        f"measured_ratio(1) is {value:.4f}, expected 32.026 to 3 decimals: nn.Embedding(1000, 512) right after "
        f"torch.manual_seed(1), rows times sqrt(512), mean row norm over the mean row norm of the sinusoidal table "
        f"for positions 0-999 (grading tries other seeds)"
    )


#: tied_logit_std for fixed recipes, stored: (arguments, output_scale, expected std)
T5_SCALE = 768**-0.5  # T5 multiplies the final vectors by d ** -0.5 before its tied head (T5-base: d = 768)
LOGIT_STDS = [
    (("scaled_normal", 32000, 1024), 1.0, 1.0),
    (("normal", 32128, 768), T5_SCALE, 1.0),
    (("normal", 32128, 768), 1.0, 27.712812921102035),
    (("xavier_uniform", 50000, 768), 1.0, 0.17394044646330106),
    ((0.02, 256000, 2048), 1.0, 0.905096679918781),
]


def _std_call(args, output_scale):
    scale = "" if output_scale == 1.0 else ", output_scale=768 ** -0.5"
    number = "" if isinstance(args[0], str) else " (a number as init: the std of a normal init)"
    return f"tied_logit_std({args[0]!r}, {args[1]}, {args[2]}{scale}){number}"


@test("q4", points=0.5)
def tied_logit_std_for_each_recipe(tied_logit_std):
    got = yield [run(tied_logit_std, *args, output_scale=scale) for args, scale, _ in LOGIT_STDS] + [
        run(tied_logit_std, "kaiming", 1000, 64),
        run(tied_logit_std, -0.02, 1000, 64),
        run(tied_logit_std, 0.0, 1000, 64),
    ]
    values = [out.number(_std_call(args, scale)) for (args, scale, _), out in zip(LOGIT_STDS, got)]
    scaled, t5, t5_unscaled, xavier, gemma = values
    assert not math.isclose(scaled, 1 / 32, rel_tol=1e-6), (
        f"{_std_call(*LOGIT_STDS[0][:2])} is 0.03125 = sigma: a logit h . w sums d products, and h leaves a "
        f"LayerNorm with norm sqrt(d), so its std is sigma * sqrt(d) (times output_scale)"
    )
    assert not math.isclose(scaled, 32.0, rel_tol=1e-6), (
        f"{_std_call(*LOGIT_STDS[0][:2])} is 32 = sigma * d: the input factor sqrt(d) multiplies the looked-up "
        f"rows only; the tied head's weight is the table W itself, so the logits' std is sigma * sqrt(d)"
    )
    assert math.isclose(scaled, 1.0, rel_tol=1e-6), (
        f"{_std_call(*LOGIT_STDS[0][:2])} is {scaled:.6g}, expected 1: sigma * sqrt(d) with sigma = d ** -0.5"
    )
    assert math.isclose(t5_unscaled, 27.712812921102035, rel_tol=1e-6), (
        f"{_std_call(*LOGIT_STDS[2][:2])} is {t5_unscaled:.6g}, expected sqrt(768) = 27.7128: N(0, 1) has sigma = 1"
    )
    assert math.isclose(t5, 1.0, rel_tol=1e-6), (
        f"{_std_call(*LOGIT_STDS[1][:2])} (T5-base's tied head) is {t5:.6g}, expected 1: output_scale multiplies h "
        f"before the head, so it multiplies every logit"
    )
    assert not math.isclose(xavier, 0.30127369076565164, rel_tol=1e-6), (
        f"{_std_call(*LOGIT_STDS[3][:2])} is {xavier:.6g}: U(-a, a) has sigma = a / sqrt(3), not a"
    )
    assert math.isclose(xavier, 0.17394044646330106, rel_tol=1e-6), (
        f"{_std_call(*LOGIT_STDS[3][:2])} is {xavier:.6g}, expected 0.17394 = sqrt(2 / (V + d)) * sqrt(d)"
    )
    assert math.isclose(gemma, 0.905096679918781, rel_tol=1e-6), (
        f"{_std_call(*LOGIT_STDS[4][:2])} (Gemma 2B's tied table as Hugging Face initialises it) is {gemma:.6g}, "
        f"expected 0.02 * sqrt(2048) = 0.905097"
    )
    for args, out in zip([("kaiming", 1000, 64), (-0.02, 1000, 64), (0.0, 1000, 64)], got[5:]):
        message = out.raises(f"tied_logit_std{args} (an init it does not accept)", ValueError)
        assert "init" in message and str(args[0]) in message, (
            f"the ValueError of tied_logit_std{args} must name the argument init and the value given "
            f"({args[0]!r}): got {message!r}"
        )
        accepts = any(word in message for word in ("normal", "xavier_uniform", "positive", "> 0"))
        assert accepts, (
            f"the ValueError of tied_logit_std{args} must say what init accepts (the three names, or a positive "
            f"number): got {message!r}"
        )


#: initial_loss for fixed (logit_std, vocab_size), stored: log V + s^2 / 2
LOSSES = [((1.0, 32000), 10.873491181781864), ((0.2, 50000), 10.839778284410283), ((3.0, 1000), 11.407755278982137),
          ((0.0, 10), 2.302585092994046)]


@test("q4", points=0.5)
def initial_loss_for_small_and_large_logits(initial_loss):
    got = yield [run(initial_loss, *args) for args, _ in LOSSES]
    values = [out.number(f"initial_loss{args}") for (args, _), out in zip(LOSSES, got)]
    unit, small, large, flat = values
    assert not math.isclose(flat, 2.302585092994046, rel_tol=1e-6) or math.isclose(
        flat, 2.302585092994046, rel_tol=1e-9
    ), (
        f"initial_loss(0.0, 10) is {flat!r}, log(10) = 2.302585092994046 only to float32's precision: compute in "
        f"Python floats (math.log) or float64"
    )
    assert math.isclose(flat, 2.302585092994046, rel_tol=1e-9), (
        f"initial_loss(0.0, 10) is {flat:.6g}, expected log(10) = 2.302585: equal logits give the uniform guess, "
        f"log V in nats (the natural log)"
    )
    assert not math.isclose(unit, 10.373491181781864, rel_tol=1e-9), (
        "initial_loss(1.0, 32000) is log V = 10.373491, the uniform guess: logits of std s cost more than log V "
        "(chapter 2: unit logits cost about log V + 1/2)"
    )
    assert not math.isclose(small, 10.919778284410283, rel_tol=1e-9), (
        "initial_loss(0.2, 50000) is log V + s / 2 = 10.9198: that agrees with log V + 1/2 only at s = 1; for "
        "z ~ N(0, s^2), E[exp(z)] = exp(s^2 / 2)"
    )
    assert not math.isclose(large, 15.907755278982137, rel_tol=1e-9), (
        "initial_loss(3.0, 1000) is log V + s^2 = 15.9078: E[exp(z)] for z ~ N(0, s^2) is exp(s^2 / 2), half "
        "the variance in the exponent"
    )
    assert math.isclose(unit, 10.873491181781864, rel_tol=1e-9), (
        f"initial_loss(1.0, 32000) is {unit:.6g}, expected log(32000) + 1/2 = 10.873491 (chapter 2: unit logits "
        f"cost about log V + 1/2)"
    )
    assert math.isclose(small, 10.839778284410283, rel_tol=1e-9) and math.isclose(
        large, 11.407755278982137, rel_tol=1e-9
    ), (
        f"initial_loss(0.2, 50000) is {small:.6g} and initial_loss(3.0, 1000) {large:.6g}, expected 10.839778 and "
        f"11.407755: log E[sum_i exp(z_i)] - E[z_y] with V logits z_i ~ N(0, s^2)"
    )
