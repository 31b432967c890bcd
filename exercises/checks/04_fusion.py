"""Public tests of exercise 04 (what `grader.check` runs). Format: course_embed/tools/grading/probe.py.

The inputs are fixed here; each expected value is stored (sinusoidal rows computed once in float64) or follows from
a known token table by indexing."""

import math

import torch

from course_embed.tools.grading.probe import as_tensor, run, test

PE8 = {  # rows of the sinusoidal table of width 8, sin and cos interleaved
    0: [0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0],
    1: [0.841470984808, 0.540302305868, 0.099833416647, 0.995004165278, 0.009999833334, 0.999950000417,
        0.000999999833, 0.9999995],
    2: [0.909297426826, -0.416146836547, 0.198669330795, 0.980066577841, 0.019998666693, 0.999800006667,
        0.001999998667, 0.999998000001],
    600: [0.044182448332, -0.999023478833, -0.304810621102, -0.952412980415, -0.279415498199, 0.96017028665,
          0.564642473395, 0.82533561491],
    1299: [-0.998821085195, -0.04854317429, -0.888791346162, -0.458312058524, 0.411071712076, 0.91160300983,
           0.963290204854, 0.2684622529],
}
PE4 = {  # rows of the sinusoidal table of width 4
    0: [0.0, 1.0, 0.0, 1.0],
    1: [0.841470984808, 0.540302305868, 0.009999833334, 0.999950000417],
    2: [0.909297426826, -0.416146836547, 0.019998666693, 0.999800006667],
    5: [-0.958924274663, 0.283662185463, 0.049979169271, 0.998750260395],
    6: [-0.279415498199, 0.96017028665, 0.059964006479, 0.998200539935],
    7: [0.656986598719, 0.753902254343, 0.069942847338, 0.997551000253],
}
TRIED = "grading also tries other sizes, dtypes, lengths and offsets"


PE8 = {p: torch.tensor(row, dtype=torch.float64) for p, row in PE8.items()}
PE4 = {p: torch.tensor(row, dtype=torch.float64) for p, row in PE4.items()}
#: Known (20, width) token tables, float64 (row 0 zero: the pad), that the gathering loads into the module.
KNOWN = {w: torch.cat([torch.zeros(1, w), torch.arange(1.0, 1.0 + 19 * w).reshape(19, w) / w]).double() for w in (4, 8)}


IDS = torch.tensor([[1, 5, 19], [0, 0, 7]])
LONG = torch.arange(700).remainder(20)[None]


def _fusion(Model, width, ids, offsets, **kwargs):
    """Model(20, 8, padding_idx=0, **kwargs) in float64 with a known token table, at each offset."""
    model = Model(20, 8, padding_idx=0, **kwargs).double()
    fresh_pad = model.token.weight[0].detach().clone()
    with torch.no_grad():
        model.token.weight.copy_(KNOWN[width])
    return {"fresh_pad": fresh_pad, "outs": [model(ids, offset) for offset in offsets]}


def _one_d(AddFusion):
    return AddFusion(20, 8)(torch.tensor([1, 2, 3]))


@test("q1", points=1)
def add_fusion_adds_pe_to_the_scaled_lookup(AddFusion):
    got = yield run(_fusion, AddFusion, 8, IDS, (0,))
    label = "AddFusion(20, 8, padding_idx=0).double()"
    r = got.ok(label)
    assert torch.all(as_tensor(r["fresh_pad"], "token.weight[0]") == 0), (
        f"{label}: row 0 of token.weight is not zero: build token = nn.Embedding(vocab_size, d_model, padding_idx=...)"
    )
    out = as_tensor(r["outs"][0], f"{label}(ids)")
    assert out.shape == (2, 3, 8), f"{label} on (2, 3) ids must return shape (2, 3, 8), got {tuple(out.shape)}"
    assert out.dtype == torch.float64, f"{label} must return the module's dtype, float64, got {out.dtype}"
    lookup = KNOWN[8][IDS] * math.sqrt(8)
    if torch.allclose(out - lookup, torch.stack([PE8[p] for p in (0, 1, 2)])[:, [0, 2, 4, 6, 1, 3, 5, 7]], atol=1e-6):
        raise AssertionError(f"{label}: PE holds [sin | cos] halves: interleave them (column 2i sin, 2i + 1 cos)")
    assert torch.allclose(out - lookup, torch.stack([PE8[p] for p in (0, 1, 2)]), atol=1e-5), (
        f"{label}(ids) minus token(ids) * sqrt(8) must be PE rows 0 .. 2 (sin and cos interleaved, base 10000)"
    )


@test("q1", points=1)
def add_fusion_any_length_and_offset_in_float64_and_2d_ids(AddFusion):
    got = yield [run(_fusion, AddFusion, 8, LONG, (600,)), run(_one_d, AddFusion)]
    label = "AddFusion(20, 8).double() on 700 tokens from offset 600"
    out = as_tensor(got[0].ok(label)["outs"][0], label)
    assert out.shape == (1, 700, 8), f"{label} must return shape (1, 700, 8), got {tuple(out.shape)}"
    positions = out[0, [0, 699]] - KNOWN[8][LONG[0, [0, 699]]] * math.sqrt(8)
    expected = torch.stack([PE8[600], PE8[1299]])
    assert torch.allclose(positions, expected, atol=1e-4), (
        f"{label}: tokens 0 and 699 must get PE rows 600 and 1299 (PE[offset : offset + seq], any length; if the "
        f"3-token check fails too, fix that first)"
    )
    pe_error = (out[0, 0] - PE8[600]).abs().max().item()  # token 0 is the pad, a zero row: its output is PE alone
    error = (positions - expected).abs().max().item()
    assert pe_error < 1e-9, (
        f"{label}: PE row 600 is off by {pe_error:.1e} in float64: compute the angles in float64 and cast "
        f"the rows to the output's dtype ({TRIED})"
    )
    assert error < 1e-9, (
        f"{label}: PE row 600 is exact but token 699's output is off by {error:.1e} in float64: the sqrt(d_model) "
        f"scale is rounded; compute it in float64 (math.sqrt(d_model)), not as a float32 tensor ({TRIED})"
    )
    got[1].raises("AddFusion(20, 8) on 1-D ids [1, 2, 3] (inputs are batch first)", ValueError)


@test("q2", points=1)
def concat_fusion_token_part_then_pe(ConcatFusion):
    ids = torch.tensor([[3, 4, 5]])
    got = yield [run(_fusion, ConcatFusion, 4, ids, (0, 5))] + [
        run(ConcatFusion, 20, 8, d_position=dp) for dp in (8, 3, 0)
    ]
    label = "ConcatFusion(20, 8, padding_idx=0).double()"
    r = got[0].ok(f"{label} (d_position = 8 // 2; token.weight is (20, 4))")
    assert torch.all(as_tensor(r["fresh_pad"], "token.weight[0]") == 0), (
        f"{label}: row 0 of token.weight is not zero: pass padding_idx to the nn.Embedding"
    )
    for offset, out in zip((0, 5), r["outs"]):
        out = as_tensor(out, f"{label}(ids, {offset})")
        assert out.shape == (1, 3, 8), f"{label}(ids, {offset}) must return shape (1, 3, 8), got {tuple(out.shape)}"
        assert torch.allclose(out[0, :, :4], KNOWN[4][ids[0]] * 2.0, atol=1e-6), (
            f"{label}(ids, {offset}): the first 4 columns must be token(ids) * sqrt(4), the square root of the "
            f"token part's own width"
        )
        assert torch.allclose(out[0, :, 4:], torch.stack([PE4[p] for p in range(offset, offset + 3)]), atol=1e-6), (
            f"{label}(ids, {offset}): the last 4 columns must be PE rows {offset} .. {offset + 2} of a width-4 table"
        )
    for dp, out in zip((8, 3, 0), got[1:]):
        out.raises(f"ConcatFusion(20, 8, d_position={dp}) (0 < d_position < d_model, even)", ValueError)


MASK_IDS = [[5, 6, 0, 0], [7, 0, 8, 9]]


def _mask(key_padding_mask, dtype):
    ids = torch.tensor(MASK_IDS, dtype=dtype)
    return {"mask": key_padding_mask(ids, 0), "ids_after": ids}


@test("q3", points=0.5)
def mask_is_true_at_the_pads(key_padding_mask):
    expected = [[False, False, True, True], [False, True, False, False]]
    got = yield [run(_mask, key_padding_mask, torch.int64), run(_mask, key_padding_mask, torch.int32)]
    for k, dtype in enumerate((torch.int64, torch.int32)):
        r = got[k].ok(f"key_padding_mask({dtype} ids, 0)")
        assert as_tensor(r["ids_after"], "ids").tolist() == MASK_IDS, (
            f"key_padding_mask({dtype} ids, 0) changed ids: compare, do not write into them"
        )
        mask = as_tensor(r["mask"], f"key_padding_mask({dtype} ids, 0)")
        assert mask.shape == (2, 4) and mask.dtype == torch.bool, (
            f"key_padding_mask({dtype} ids, 0) must return a (2, 4) torch.bool tensor, got {tuple(mask.shape)} "
            f"{mask.dtype}"
        )
        assert mask.tolist() != [[not m for m in row] for row in expected], (
            f"key_padding_mask({dtype} ids, 0) is True at the real tokens: nn.MultiheadAttention's key_padding_mask "
            f"means True = ignore this key, so True at the pads"
        )
        assert mask.tolist() == expected, f"key_padding_mask({dtype} ids, 0) must be True exactly where ids == 0"


@test("q3", points=0.5)
def mask_refuses_float_ids(key_padding_mask):
    got = yield [run(_mask, key_padding_mask, torch.int64),
                 run(key_padding_mask, torch.tensor(MASK_IDS, dtype=torch.float32), 0)]
    mask = as_tensor(got[0].ok("key_padding_mask(int64 ids, 0)")["mask"], "key_padding_mask(int64 ids, 0)")
    assert mask.dtype == torch.bool and bool(mask.any()), (
        "key_padding_mask(int64 ids, 0) must return a torch.bool mask, True at the pads (this test credits the "
        "TypeError to an answer that builds the mask)"
    )
    got[1].raises("key_padding_mask(float ids, 0)", TypeError)


@test("q4", points=1)
def mean_abs_cos_for_seed_1(mean_abs_cos):
    got = yield run(mean_abs_cos, 1)
    value = got.number("mean_abs_cos(1)")
    assert abs(value - 0.037247) <= 0.000051, (
        f"mean_abs_cos(1) is {value:.5f}, expected 0.0372 to 4 decimals: rows 0-99 of nn.Embedding(1000, 512) right "
        f"after torch.manual_seed(1), PE rows 0-99 of width 512, |cos| per pair, then the mean (grading tries other "
        f"seeds)"
    )


#: Right, left and inner padding (pad id 1), and the positions RoBERTa gives them
PADDED = [[5, 6, 7, 1, 1], [1, 1, 5, 6, 7], [5, 1, 6, 1, 7]]
ROBERTA = [[2, 3, 4, 1, 1], [1, 1, 2, 3, 4], [2, 1, 3, 1, 4]]
#: the same ids numbered column by column (pads included, then set to padding_idx), with the pads' running count
#: left in place (no mask), from padding_idx instead of padding_idx + 1, and counted down the batch (dim 0)
BY_COLUMN = [[2, 3, 4, 1, 1], [1, 1, 4, 5, 6], [2, 1, 4, 1, 6]]
UNMASKED = [[2, 3, 4, 4, 4], [1, 1, 2, 3, 4], [2, 2, 3, 3, 4]]
FROM_PAD = [[1, 2, 3, 1, 1], [1, 1, 1, 2, 3], [1, 1, 2, 1, 3]]
DOWN_THE_BATCH = [[2, 2, 2, 1, 1], [1, 1, 3, 2, 2], [3, 1, 4, 1, 3]]


def _positions(roberta_positions, ids, padding_idx, **kwargs):
    out = roberta_positions(ids, padding_idx, **kwargs)
    return {"out": out, "ids_after": ids}


@test("q5", points=0.25)
def roberta_positions_count_the_real_tokens(roberta_positions):
    got = yield [
        run(_positions, roberta_positions, torch.tensor(PADDED), 1),
        run(_positions, roberta_positions, torch.tensor(PADDED, dtype=torch.int32), 1),
        run(_positions, roberta_positions, torch.tensor([[3, 4, 0], [0, 3, 4]]), 0),
    ]
    label = f"roberta_positions({PADDED}, 1)"
    r = got[0].ok(label)
    found = as_tensor(r["out"], label)
    assert found.shape == (3, 5) and found.dtype == torch.int64, (
        f"{label} must return a (3, 5) torch.int64 tensor, got {tuple(found.shape)} {found.dtype}"
    )
    assert as_tensor(r["ids_after"], "ids").tolist() == PADDED, f"{label} changed ids: compute into a new tensor"
    found = found.tolist()
    mistakes = [
        (BY_COLUMN, "numbers every column, pads included: count the real tokens only, so the left-padded second "
         "sequence starts at 2, like the first"),
        (UNMASKED, "gives the pads the count of real tokens before them: every pad gets position padding_idx (1)"),
        (FROM_PAD, "starts at padding_idx: the k-th real token is at padding_idx + k, so the first is at 2 and no "
         "real token shares the pads' position"),
        (DOWN_THE_BATCH, "counts down the batch: count along each sequence (dim 1)"),
    ]
    for wrong, why in mistakes:
        assert found != wrong, f"{label} is {found}: it {why}"
    assert found == ROBERTA, f"{label} is {found}, expected {ROBERTA}"
    found32 = as_tensor(got[1].ok(f"{label} on int32 ids")["out"], f"{label} on int32 ids")
    assert found32.dtype == torch.int64 and found32.tolist() == ROBERTA, (
        f"{label} on int32 ids must return the same int64 positions, got {found32.dtype} {found32.tolist()}"
    )
    zero = as_tensor(got[2].ok("roberta_positions([[3, 4, 0], [0, 3, 4]], 0)")["out"], "positions")
    assert zero.tolist() == [[1, 2, 0], [0, 1, 2]], (
        f"roberta_positions([[3, 4, 0], [0, 3, 4]], 0) is {zero.tolist()}, expected [[1, 2, 0], [0, 1, 2]]: "
        f"with padding_idx 0 the real tokens start at 1 and the pads are at 0"
    )


@test("q5", points=0.25)
def roberta_positions_from_an_offset(roberta_positions):
    ids = [[1, 8, 9], [8, 9, 1]]
    got = yield [run(_positions, roberta_positions, torch.tensor(ids), 1, offset=3),
                 run(_positions, roberta_positions, torch.tensor(ids), 1)]
    label = f"roberta_positions({ids}, 1, offset=3)"
    found = as_tensor(got[0].ok(label)["out"], label).tolist()
    plain = as_tensor(got[1].ok(f"roberta_positions({ids}, 1)")["out"], "positions").tolist()
    # only the offset, against the answer's own numbering without one (the first check of question 5 grades that)
    pads_moved = any(found[r][c] != plain[r][c] for r in range(2) for c in range(3) if ids[r][c] == 1)
    assert not pads_moved, f"{label} is {found}: the pads stay where they are without an offset (at padding_idx, 1)"
    shifted = [[p if i == 1 else p + 3 for i, p in zip(id_row, row)] for id_row, row in zip(ids, plain)]
    assert found == shifted, (
        f"{label} is {found}, expected {shifted}: the offset counts real tokens seen before, so each real token's "
        f"position grows by 3"
    )


@test("q5", points=0.25)
def roberta_positions_reject_unbatched_ids(roberta_positions):
    got = yield [run(roberta_positions, torch.tensor([5, 6, 1]), 1),
                 run(_positions, roberta_positions, torch.tensor([[5, 6, 1]]), 1)]
    got[0].raises("roberta_positions(tensor([5, 6, 1]), 1) (1-D ids: batch first, ids.unsqueeze(0))", ValueError)
    found = as_tensor(got[1].ok("roberta_positions([[5, 6, 1]], 1)")["out"], "positions").tolist()
    # not the values (the first check of question 5 grades them), only that 2-D ids get positions, not all equal
    assert len(found) == 1 and len(found[0]) == 3 and len(set(found[0])) > 1, (
        f"roberta_positions([[5, 6, 1]], 1) is {found}: it must number the tokens (this test credits the ValueError "
        f"to an answer that numbers 2-D ids)"
    )
