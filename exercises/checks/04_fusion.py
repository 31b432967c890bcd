"""Public tests of exercise 04 (what `grader.check` runs). Format: course_embed/tools/grading/probe.py."""

import math

import torch

from course_embed.tools.grading.probe import as_tensor, run, test


def pe_rows(start, length, d):
    """Sinusoidal rows start .. start + length - 1, sin and cos interleaved, float64."""
    angles = torch.arange(start, start + length, dtype=torch.float64)[:, None] * 10000.0 ** (
        -torch.arange(0, d, 2, dtype=torch.float64) / d)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)


def _fusion(Model, args, ids, offsets):
    torch.manual_seed(0)
    model = Model(*args)
    return {"is_embedding": isinstance(model.token, torch.nn.Embedding), "weight": model.token.weight,
            "outs": [model(ids, offset) for offset in offsets]}


IDS = torch.tensor([[1, 5, 19], [0, 0, 7]])


@test("q1", points=1)
def add_fusion_adds_pe_to_the_scaled_lookup(AddFusion):
    got = yield run(_fusion, AddFusion, (20, 8), IDS, (0,))
    r = got.ok("AddFusion(20, 8)")
    assert r["is_embedding"], "model.token must be an nn.Embedding"
    out = as_tensor(r["outs"][0], "AddFusion(20, 8)(ids)")
    assert tuple(out.shape) == (2, 3, 8), f"expected (2, 3, 8), got {tuple(out.shape)}"
    expected = r["weight"].data.double()[IDS] * math.sqrt(8) + pe_rows(0, 3, 8)
    assert torch.allclose(out.double(), expected, atol=1e-5), \
        "out must be token(ids) * sqrt(d_model) + PE[:seq] (PE with sin and cos interleaved)"


def _offset_and_shape(AddFusion):
    torch.manual_seed(0)
    model = AddFusion(20, 8)
    long_ids = torch.arange(700).remainder(20)[None]
    try:
        model(torch.tensor([1, 2, 3]))
        error = ""
    except Exception as err:
        error = type(err).__name__
    return {"weight": model.token.weight, "ids": long_ids, "out": model(long_ids, 600), "one_d": error}


@test("q1", points=1)
def add_fusion_any_length_and_offset_and_2d_ids(AddFusion):
    got = yield run(_offset_and_shape, AddFusion)
    r = got.ok("AddFusion(20, 8) on 700 tokens from offset 600")
    out = as_tensor(r["out"], "AddFusion(20, 8)(ids, 600)")
    expected = r["weight"].data.double()[r["ids"].data] * math.sqrt(8) + pe_rows(600, 700, 8)
    assert tuple(out.shape) == (1, 700, 8) and torch.allclose(out.double(), expected, atol=1e-4), \
        "700 tokens from offset 600 must get PE rows 600 .. 1299 (any length, any offset)"
    assert r["one_d"] == "ValueError", f"1-D ids must raise ValueError, got {r['one_d'] or 'no error'}"


@test("q2", points=1)
def concat_fusion_token_part_then_pe(ConcatFusion):
    ids = torch.tensor([[3, 4, 5]])
    got = yield [run(_fusion, ConcatFusion, (20, 8), ids, (0, 5)), run(ConcatFusion, 20, 8, d_position=8)]
    got[1].raises("ConcatFusion(20, 8, d_position=8)", ValueError)
    r = got[0].ok("ConcatFusion(20, 8)")
    weight = r["weight"].data.double()
    assert tuple(weight.shape) == (20, 4), "with d_position = d_model // 2 the token table is (20, 4)"
    for offset, out in zip((0, 5), r["outs"]):
        out = as_tensor(out, f"ConcatFusion(20, 8)(ids, {offset})").double()
        assert tuple(out.shape) == (1, 3, 8), f"expected (1, 3, 8), got {tuple(out.shape)}"
        assert torch.allclose(out[0, :, :4], weight[ids[0]] * math.sqrt(4), atol=1e-5), \
            "the first d_model - d_position columns are the lookup scaled by the square root of ITS width (4)"
        assert torch.allclose(out[0, :, 4:], pe_rows(offset, 3, 4), atol=1e-5), \
            f"the last d_position columns are PE rows {offset} .. {offset + 2}"


@test("q3", points=1)
def mask_is_true_at_the_pads_and_refuses_float_ids(key_padding_mask):
    ids = torch.tensor([[5, 6, 0, 0], [7, 0, 8, 9]])
    got = yield [run(key_padding_mask, ids, 0), run(key_padding_mask, ids.float(), 0)]
    mask = got[0].tensor("key_padding_mask(ids, 0)", shape=(2, 4), dtype=torch.bool)
    assert mask.tolist() == [[False, False, True, True], [False, True, False, False]], "True exactly at the pads"
    got[1].raises("key_padding_mask(float ids, 0)", TypeError)


def mean_abs_cos_reference(seed):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        tokens = torch.nn.Embedding(1000, 512).weight.detach()[:100].double()
    return torch.nn.functional.cosine_similarity(tokens, pe_rows(0, 100, 512), dim=-1).abs().mean().item()


@test("q4", points=1)
def mean_abs_cos_for_seed_1(mean_abs_cos):
    got = yield run(mean_abs_cos, 1)
    value = got.number("mean_abs_cos(1)")
    assert abs(value - mean_abs_cos_reference(1)) <= 0.000051, \
        "mean_abs_cos(1) is off (checked to the 4 decimals asked): which rows, which positions, abs before mean?"
