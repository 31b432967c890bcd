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
    before = returned(torch.eye(4))  # (4, 11): the tied layer's weight, transposed
    with torch.no_grad():
        emb.weight.mul_(-1.0)  # a change to the embedding's table...
    after = returned(torch.eye(4))  # ...is a change to the output layer's
    return {"before": before, "after": after}


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
