"""Hidden tests of exercise 02: the instructor's only (not in a release). Each test draws its inputs from the grading
run's secret `seed` and gathers the answers' outputs before its `yield` (in the sandbox); after it, in the grader,
it rebuilds the same inputs and compares with course_embed's reference."""

import torch

from course_embed.tools.grading.probe import as_tensor, between, choose, run, test

INITS = ("normal", "xavier_uniform", "scaled_normal")


def _ratio_cases(seed):
    gen = torch.Generator().manual_seed(seed)
    return [(init, between(gen, 2, 60000), 2 * between(gen, 1, 1024), bool(between(gen, 0, 1)))
            for init in INITS for _ in range(3)]


@test("q1", points=1, hidden=True)
def ratio_matches_reference(expected_norm_ratio, *, seed):
    cases = _ratio_cases(seed)
    got = yield [run(expected_norm_ratio, *case[:3], scale=case[3]) for case in cases]
    import math

    from course_embed.lab.token_embedding import init_std

    for (init, v, d, scale), out in zip(cases, got):
        label = f"expected_norm_ratio({init!r}, {v}, {d}, scale={scale})"
        value = out.number(label)
        std = init_std(init, v, d)
        expected = std * math.sqrt(d) * (math.sqrt(d) if scale else 1.0) / math.sqrt(d / 2)
        assert math.isclose(value, expected, rel_tol=1e-6), (
            f"{label} is {value:.6g}, expected {expected:.6g} = sigma * sqrt(d){' * sqrt(d)' if scale else ''} / "
            f"sqrt(d / 2) with sigma = {std:.6g} for {init}"
        )


@test("q1", points=1, hidden=True)
def ratio_predicts_a_measured_table(expected_norm_ratio, *, seed):
    gen = torch.Generator().manual_seed(seed)
    v, d, data_seed = between(gen, 2000, 5000), 2 * between(gen, 32, 96), between(gen, 0, 2**31)
    got = yield [run(expected_norm_ratio, init, v, d, scale=True) for init in INITS]
    import course_embed as ce
    from course_embed.lab.token_embedding import row_norms

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(data_seed)
        for init, out in zip(INITS, got):
            label = f"expected_norm_ratio({init!r}, {v}, {d})"
            value = out.number(label)
            tokens = ce.TokenEmbedding(v, d, scale=True, init=init)(torch.arange(v)).double()
            measured = tokens.pow(2).sum(-1).mean().sqrt().item() / row_norms(ce.sinusoidal_table(10, d)).mean().item()
            assert abs(value - measured) < 0.02 * measured, (
                f"{label} is {value:.4g}, but a table initialised with {init} measures {measured:.4g}"
            )


@test("q1", points=1, hidden=True)
def ratio_rejects_bad_input(expected_norm_ratio, *, seed):
    gen = torch.Generator().manual_seed(seed)
    v, d = between(gen, 2, 5000), 2 * between(gen, 1, 500)
    cases = [(choose(gen, ["uniform", "xavier", "Normal", "kaiming"]), v, d), ("normal", v, d + 1)]
    got = yield [run(expected_norm_ratio, "scaled_normal", v, d)] + [run(expected_norm_ratio, *args) for args in cases]
    import math

    value = got[0].number(f"expected_norm_ratio('scaled_normal', {v}, {d})")
    assert math.isclose(value, math.sqrt(2), rel_tol=1e-6), (
        f"expected_norm_ratio('scaled_normal', {v}, {d}) is {value:.6g}, expected sqrt(2) = 1.41421 (this test "
        f"credits the errors for bad input to an answer that computes the ratio)"
    )
    for args, out in zip(cases, got[1:]):
        out.raises(f"expected_norm_ratio{args}", ValueError)


def _tie_inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    v, d = between(gen, 2, 60), between(gen, 1, 16)
    table = torch.randn(v, d, generator=gen)
    ids = torch.randint(0, v, (between(gen, 1, 3), between(gen, 1, 5)), generator=gen)
    return v, d, table, ids


def _tie_and_train(tie, seed):
    v, d, table, ids = _tie_inputs(seed)
    emb, out = torch.nn.Embedding(v, d), torch.nn.Linear(d, v, bias=False)
    with torch.no_grad():
        emb.weight.copy_(table)
    tied = tie(emb, out)
    tied(emb(ids)).logsumexp(-1).sum().backward()
    return {"grad": emb.weight.grad, "logits": tied(torch.eye(d))}


@test("q2", points=0.5, hidden=True)
def tie_shares_one_table(tie, *, seed):
    got = yield run(_tie_and_train, tie, seed)
    v, d, table, ids = _tie_inputs(seed)
    label = f"tie(nn.Embedding({v}, {d}), nn.Linear({d}, {v})) then a training step on ids of shape {tuple(ids.shape)}"
    r = got.ok(label)
    w = table.double().requires_grad_()
    (torch.nn.functional.embedding(ids, w) @ w.T).logsumexp(-1).sum().backward()
    logits = as_tensor(r["logits"], "the tied layer's output")
    assert logits.shape == (d, v) and torch.allclose(logits.double(), table.double().T, atol=1e-6), (
        f"{label}: the returned layer does not compute with the embedding's table"
    )
    assert r["grad"] is not None, f"{label}: no gradient reached the embedding's table"
    assert torch.allclose(as_tensor(r["grad"], "the embedding's gradient").double(), w.grad, rtol=1e-5, atol=1e-6), (
        f"{label}: the embedding's gradient is not the sum over both uses of one table (a copy gets only one)"
    )


def _message(tie, v, d):
    tie(torch.nn.Embedding(v, d), torch.nn.Linear(v, d))


@test("q2", points=0.5, hidden=True)
def tie_error_names_both_shapes(tie, *, seed):
    gen = torch.Generator().manual_seed(seed)
    v, d = between(gen, 20, 99), between(gen, 2, 19)
    got = yield [run(_tie_and_train, tie, seed), run(_message, tie, v, d)]
    import re

    logits = as_tensor(got[0].ok("tie then a training step")["logits"], "the tied layer's output")
    assert torch.allclose(logits.double(), _tie_inputs(seed)[2].double().T, atol=1e-6), (
        "the layer tie returns does not compute with the embedding's table"
    )
    message = got[1].raises(f"tie(nn.Embedding({v}, {d}), nn.Linear({v}, {d}))", ValueError)
    assert re.search(rf"{v}\D{{1,4}}{d}", message) and re.search(rf"{d}\D{{1,4}}{v}", message), (
        f"the ValueError of tie(nn.Embedding({v}, {d}), nn.Linear({v}, {d})) must name both shapes, ({v}, {d}) and "
        f"({d}, {v}): got {message!r}"
    )


@test("q3", points=1, hidden=True)
def measured_ratio_for_other_seeds(measured_ratio, *, seed):
    gen = torch.Generator().manual_seed(seed)
    seeds = (between(gen, 2, 10**6), between(gen, 2, 10**6))
    got = yield [run(measured_ratio, s) for s in seeds]
    import math

    import course_embed as ce
    from course_embed.lab.token_embedding import row_norms

    for s, out in zip(seeds, got):
        value = out.number(f"measured_ratio({s})")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(s)
            table = torch.nn.Embedding(1000, 512).weight
        pe_norm = row_norms(ce.sinusoidal_table(1000, 512)).mean().item()
        expected = row_norms(table).mean().item() * math.sqrt(512) / pe_norm
        assert abs(value - expected) <= 0.00051, (
            f"measured_ratio({s}) is {value:.4f}, expected {expected:.3f} to the 3 decimals asked (the seed set "
            f"inside the function, right before nn.Embedding(1000, 512)?)"
        )


def _logit_std_cases(seed):
    """Per init name: a size, and the output scale: 1, T5's d ** -0.5, or another drawn in [0.1, 2]."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for init in INITS:
        for kind in ("none", "t5", "drawn"):
            v, d = between(gen, 2, 300_000), between(gen, 1, 8192)
            scale = {"none": 1.0, "t5": d**-0.5, "drawn": between(gen, 100, 2000) / 1000}[kind]
            cases.append((init, v, d, scale))
    return cases


def _expected_logit_std(init, v, d, scale):
    from course_embed.lab.token_embedding import init_std

    std = init if isinstance(init, float) else init_std(init, v, d)
    return std * d**0.5 * scale


@test("q4", points=0.75, hidden=True)
def tied_logit_std_for_each_init_and_output_scale(tied_logit_std, *, seed):
    cases = _logit_std_cases(seed)
    got = yield [run(tied_logit_std, init, v, d, output_scale=scale) for init, v, d, scale in cases]
    import math

    for (init, v, d, scale), out in zip(cases, got):
        label = f"tied_logit_std({init!r}, {v}, {d}, output_scale={scale:.6g})"
        value = out.number(label)
        expected = _expected_logit_std(init, v, d, scale)
        assert math.isclose(value, expected, rel_tol=1e-6), (
            f"{label} is {value:.6g}, expected {expected:.6g} = sigma * sqrt(d) * output_scale (h of norm sqrt(d), "
            f"the head's weight the table itself)"
        )


@test("q4", points=0.25, hidden=True)
def tied_logit_std_for_a_numeric_init(tied_logit_std, *, seed):
    gen = torch.Generator().manual_seed(seed)
    cases = [(between(gen, 1, 100) / 1000, between(gen, 2, 300_000), between(gen, 2, 8192)) for _ in range(4)]
    got = yield [run(tied_logit_std, std, v, d) for std, v, d in cases]
    import math

    for (std, v, d), out in zip(cases, got):
        label = f"tied_logit_std({std}, {v}, {d})"
        value = out.number(label)
        assert math.isclose(value, std * math.sqrt(d), rel_tol=1e-6), (
            f"{label} is {value:.6g}, expected {std * math.sqrt(d):.6g}: a number as init is the std of a normal "
            f"init, so the logits' std is init * sqrt(d)"
        )


@test("q4", points=0.5, hidden=True)
def tied_logit_std_rejects_an_unknown_init(tied_logit_std, *, seed):
    gen = torch.Generator().manual_seed(seed)
    v, d = between(gen, 2, 50_000), between(gen, 2, 4096)
    bad = [choose(gen, ["uniform", "xavier", "Normal", "kaiming", "t5"]), choose(gen, [0, 0.0, -0.02, -1.0])]
    got = yield [run(tied_logit_std, "scaled_normal", v, d)] + [run(tied_logit_std, init, v, d) for init in bad]
    import math

    value = got[0].number(f"tied_logit_std('scaled_normal', {v}, {d})")
    # only that a valid init returns its std (the other q4 tests grade the values)
    assert math.isclose(value, 1.0, rel_tol=1e-6), (
        f"tied_logit_std('scaled_normal', {v}, {d}) is {value:.6g}, expected 1 (this test credits the errors for an "
        f"unknown init to an answer that computes the std)"
    )
    for init, out in zip(bad, got[1:]):
        message = out.raises(f"tied_logit_std({init!r}, {v}, {d})", ValueError)
        assert "init" in message and str(init) in message, (
            f"the ValueError of tied_logit_std({init!r}, {v}, {d}) must name the argument init and the value given: "
            f"got {message!r}"
        )


@test("q4", points=0.5, hidden=True)
def initial_loss_matches_the_closed_form(initial_loss, *, seed):
    gen = torch.Generator().manual_seed(seed)
    cases = [(between(gen, 0, 3000) / 1000, between(gen, 2, 300_000)) for _ in range(8)]
    got = yield [run(initial_loss, s, v) for s, v in cases]
    import math

    for (s, v), out in zip(cases, got):
        label = f"initial_loss({s}, {v})"
        value = out.number(label)
        expected = math.log(v) + s * s / 2
        assert math.isclose(value, expected, rel_tol=1e-9), (
            f"{label} is {value:.9g}, expected {expected:.9g} = log V + s^2 / 2 (log E[sum_i exp(z_i)] with "
            f"z_i ~ N(0, s^2))"
        )
