"""Hidden tests of exercise 02: the instructor's only (not in a release). Each test gathers the answers' outputs
before its `yield` (in the sandbox) and compares them with course_embed's reference after it (in the grader)."""

import torch

from course_embed.tools.grading.probe import as_tensor, run, test

RATIO_CASES = [(init, v, d, scale) for init in ("normal", "xavier_uniform", "scaled_normal")
               for v, d in [(30522, 768), (50257, 1024), (10, 2), (7, 6)] for scale in (True, False)]


@test("q1", points=1, hidden=True)
def ratio_matches_reference(expected_norm_ratio):
    got = yield [run(expected_norm_ratio, *case) for case in RATIO_CASES]
    import math

    from course_embed.lab.token_embedding import init_std
    for (init, v, d, scale), out in zip(RATIO_CASES, got):
        value = out.number(f"expected_norm_ratio({init!r}, {v}, {d}, scale={scale})")
        expected = init_std(init, v, d) * math.sqrt(d) * (math.sqrt(d) if scale else 1.0) / math.sqrt(d / 2)
        assert math.isclose(value, expected, rel_tol=1e-6), \
            f"expected_norm_ratio({init!r}, {v}, {d}, scale={scale}) is wrong (the std of {init}?)"


@test("q1", points=1, hidden=True)
def ratio_predicts_a_measured_table(expected_norm_ratio):
    inits = ("normal", "xavier_uniform", "scaled_normal")
    got = yield [run(expected_norm_ratio, init, 4000, 128, scale=True) for init in inits]
    import course_embed as ce
    from course_embed.lab.token_embedding import row_norms
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        for init, out in zip(inits, got):
            value = out.number(f"expected_norm_ratio({init!r}, 4000, 128)")
            tokens = ce.TokenEmbedding(4000, 128, scale=True, init=init)(torch.arange(4000)).double()
            pe_norm = row_norms(ce.sinusoidal_table(10, 128)).mean().item()
            measured = tokens.pow(2).sum(-1).mean().sqrt().item() / pe_norm
            assert abs(value - measured) < 0.02 * measured, f"{init}: the ratio does not match a measured table"


@test("q1", points=1, hidden=True)
def ratio_rejects_bad_input(expected_norm_ratio):
    cases = [("uniform", 100, 64), ("xavier", 100, 64), ("normal", 100, 63)]
    got = yield [run(expected_norm_ratio, *args) for args in cases]
    for args, out in zip(cases, got):
        out.raises(f"expected_norm_ratio{args}", ValueError)


def _tie_and_train(tie):
    torch.manual_seed(3)
    emb, out = torch.nn.Embedding(30, 8), torch.nn.Linear(8, 30, bias=False)
    start = emb.weight.detach().clone()
    tie(emb, out)
    count = len(list(torch.nn.ModuleList([emb, out]).parameters()))
    ids = torch.tensor([[1, 4, 29], [0, 3, 3]])
    out(emb(ids)).logsumexp(-1).sum().backward()
    return {"start": start, "count": count, "grad": emb.weight.grad, "ids": ids}


@test("q2", points=0.5, hidden=True)
def tie_shares_one_table(tie):
    got = yield run(_tie_and_train, tie)
    r = got.ok("tie then a training step")
    assert r["count"] == 1, "one shared table: the model must count one parameter"
    w = r["start"].data.double().requires_grad_()
    ids = r["ids"].data
    (torch.nn.functional.embedding(ids, w) @ w.T).logsumexp(-1).sum().backward()
    grad = as_tensor(r["grad"], "the embedding's gradient")
    torch.testing.assert_close(grad.double(), w.grad, rtol=1e-5, atol=1e-6,
                               msg=lambda m: f"the gradient must flow through both uses of the one table: {m}")


def _message(tie):
    try:
        tie(torch.nn.Embedding(30, 8), torch.nn.Linear(30, 8))
    except ValueError as err:
        return str(err)
    return None


@test("q2", points=0.5, hidden=True)
def tie_error_names_both_shapes(tie):
    got = yield run(_message, tie)
    import re
    message = got.ok("tie(nn.Embedding(30, 8), nn.Linear(30, 8))")
    assert message is not None, "tying a (30, 8) table to nn.Linear(30, 8) (weight (8, 30)) must raise ValueError"
    assert re.search(r"30\D{1,4}8", message) and re.search(r"8\D{1,4}30", message), \
        f"the ValueError must name both shapes, (30, 8) and (8, 30): got {message!r}"


@test("q3", points=1, hidden=True)
def measured_ratio_for_several_seeds(measured_ratio):
    seeds = (0, 5)
    got = yield [run(measured_ratio, s) for s in seeds]
    import math

    import course_embed as ce
    from course_embed.lab.token_embedding import row_norms
    for seed, out in zip(seeds, got):
        value = out.number(f"measured_ratio({seed})")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            table = torch.nn.Embedding(1000, 512).weight
        pe_norm = row_norms(ce.sinusoidal_table(1000, 512)).mean().item()
        expected = row_norms(table).mean().item() * math.sqrt(512) / pe_norm
        assert abs(value - expected) <= 0.00051, f"measured_ratio({seed}) is off by more than the 3 decimals asked"
