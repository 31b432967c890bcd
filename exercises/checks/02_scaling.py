"""Public tests of exercise 02 (what `grader.check` runs). Format: course_embed/tools/grading/probe.py."""

import math

import torch

from course_embed.tools.grading.probe import run, test


@test("q1", points=1)
def ratio_for_normal_and_scaled_normal(expected_norm_ratio):
    got = yield [run(expected_norm_ratio, "scaled_normal", 1000, 64, scale=True),
                 run(expected_norm_ratio, "normal", 1000, 64, scale=False),
                 run(expected_norm_ratio, "uniform", 1000, 64)]
    value = got[0].number("expected_norm_ratio('scaled_normal', 1000, 64)")
    assert math.isclose(value, math.sqrt(2), rel_tol=1e-6), \
        "scaled_normal with the sqrt(d) scale gives unit-RMS token vectors: compare that with a PE row's norm"
    value = got[1].number("expected_norm_ratio('normal', 1000, 64, scale=False)")
    assert math.isclose(value, 8 / math.sqrt(32), rel_tol=1e-6), \
        "normal init without the scale, d = 64: the token's RMS norm is 8; divide it by a PE row's norm"
    got[2].raises("expected_norm_ratio('uniform', 1000, 64)", ValueError)


def _tie_probe(tie):
    emb, out = torch.nn.Embedding(11, 4), torch.nn.Linear(4, 11)
    returned = tie(emb, out)
    wrong = torch.nn.Linear(11, 4)
    try:
        tie(torch.nn.Embedding(11, 4), wrong)
        error = ""
    except Exception as err:
        error = type(err).__name__
    return {"returned_output": returned is out, "same": out.weight is emb.weight, "wrong_way": error}


@test("q2", points=1)
def tie_shares_the_parameter_and_refuses_a_wrong_layer(tie):
    got = yield run(_tie_probe, tie)
    r = got.ok("tie(embedding, output)")
    assert r["returned_output"], "return the output layer"
    assert r["same"], "the output layer must use the embedding's Parameter itself, not a copy"
    assert r["wrong_way"] == "ValueError", \
        f"tying to nn.Linear(11, 4) (the wrong way round) must raise ValueError, got {r['wrong_way'] or 'no error'}"


@test("q3", points=1)
def measured_ratio_for_seed_1(measured_ratio):
    got = yield run(measured_ratio, 1)
    value = got.number("measured_ratio(1)")
    assert abs(value - _measured_ratio(1)) <= 0.00051, \
        "measured_ratio(1) is off (checked to the 3 decimals asked): which table, which scale, which norm?"


def _measured_ratio(seed):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        table = torch.nn.Embedding(1000, 512).weight.detach().double()
    angles = torch.arange(1000, dtype=torch.float64)[:, None] * 10000.0 ** (
        -torch.arange(0, 512, 2, dtype=torch.float64) / 512)
    pe = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)
    return ((table * math.sqrt(512)).norm(dim=1).mean() / pe.norm(dim=1).mean()).item()
