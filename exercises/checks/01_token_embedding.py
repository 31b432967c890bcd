"""Public tests of exercise 01 (what `grader.check` runs). Format: course_embed/tools/grading/probe.py."""

import math

import torch

from course_embed.tools.grading.probe import as_tensor, run, test


@test("q1", points=1)
def init_in_place_with_the_right_std(init_embedding_):
    def probe():
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.full((2000, 64), 3.0))
        return {"same": init_embedding_(w, padding_idx=0) is w, "weight": w}

    got = yield run(probe)
    if got.raised and "leaf Variable" in got.message:
        raise AssertionError("init_embedding_ changes a Parameter in place: wrap the init in `with torch.no_grad():`")
    result = got.ok("init_embedding_(w, padding_idx=0)")
    assert result["same"], "return the tensor you were given, initialised in place"
    w = as_tensor(result["weight"], "weight")
    assert torch.all(w[0] == 0), "row padding_idx must be zero after the init"
    std = w[1:].std().item()
    assert abs(std - 64 ** -0.5) < 0.05 * 64 ** -0.5, f"std is {std:.4f}, expected d_model ** -0.5 = {64 ** -0.5:.4f}"


def _lookup(TokenEmbedding, ids, upstream=None):
    """Build TokenEmbedding(10, 8, padding_idx=0), look up ``ids``, backpropagate ``upstream``."""
    torch.manual_seed(0)
    emb = TokenEmbedding(10, 8, padding_idx=0)
    out = emb(ids)
    if upstream is not None:
        out.backward(upstream)
    return {"weight": emb.weight, "out": out, "grad": emb.weight.grad}


IDS = torch.tensor([[0, 3, 9], [1, 1, 0]])


@test("q2", points=1)
def token_embedding_scales_the_lookup(TokenEmbedding):
    got = yield run(_lookup, TokenEmbedding, IDS)
    result = got.ok("TokenEmbedding(10, 8, padding_idx=0)")
    weight = as_tensor(result["weight"], "TokenEmbedding(10, 8).weight")
    assert tuple(weight.shape) == (10, 8), "weight must be (vocab_size, d_model)"
    out = as_tensor(result["out"], "TokenEmbedding(10, 8)(ids)")
    assert tuple(out.shape) == (2, 3, 8), f"expected shape (2, 3, 8), got {tuple(out.shape)}"
    assert torch.allclose(out, weight[IDS] * math.sqrt(8)), "forward must return weight[ids] * sqrt(d_model)"
    assert torch.all(out[0, 0] == 0), "the pad id must map to a zero vector"


@test("q2", points=1)
def token_embedding_pad_row_gets_no_gradient_and_float_ids_raise(TokenEmbedding):
    upstream = torch.linspace(-1.0, 1.0, 48).reshape(2, 3, 8)  # not zero at the pads
    got = yield [run(_lookup, TokenEmbedding, IDS, upstream), run(_lookup, TokenEmbedding, IDS.float())]
    grad = got[0].ok("backward through TokenEmbedding")["grad"]
    assert grad is not None, "no gradient reached weight: use the Parameter itself in forward, not a copy"
    grad = as_tensor(grad, "weight.grad")
    assert torch.all(grad[0] == 0), "the pad row must receive no gradient (F.embedding's padding_idx)"
    assert grad[3].abs().sum() > 0, "row 3 was looked up: it must receive a gradient"
    got[1].raises("forward with float ids", TypeError)


@test("q3", points=1)
def mean_row_norm_for_seed_1(mean_row_norm):
    got = yield run(mean_row_norm, 1)
    value = got.number("mean_row_norm(1)")
    expected = _mean_row_norm(1)
    assert abs(value - expected) <= 0.0051, \
        "mean_row_norm(1) is off (checked to the 2 decimals asked): which init, which seed, which norm?"


def _mean_row_norm(seed):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        weight = torch.nn.Embedding(1000, 512).weight.detach().double()
    return weight.norm(dim=1).mean().item()
