"""Hidden tests of exercise 04: the instructor's only (not in a release). Each test gathers the answers' outputs
before its `yield` (in the sandbox) and compares them with course_embed's reference after it (in the grader)."""

import torch

from course_embed.tools.grading.probe import as_tensor, run, test

ADD_CASES = [(50, 16, 0, 3, 9, torch.float32), (9, 2, None, 1, 1, torch.float32), (100, 30, 99, 2, 700, torch.float64)]
OFFSETS = (0, 3, 600)


def _cases(Model, cases, offsets, kwargs_of):
    gen = torch.Generator().manual_seed(4)
    found = []
    for case in cases:
        v, b, s, dtype = case[0], case[-3], case[-2], case[-1]
        torch.manual_seed(1)
        model = Model(*case[:2], **kwargs_of(case)).to(dtype)
        ids = torch.randint(0, v, (b, s), generator=gen)
        kept = ids.clone()
        found.append({"weight": model.token.weight, "pad": model.token.padding_idx, "ids": kept,
                      "outs": [model(ids, offset) for offset in offsets], "ids_unchanged": torch.equal(ids, kept)})
    return found


@test("q1", points=1, hidden=True)
def add_fusion_matches_reference(AddFusion):
    got = yield run(_cases, AddFusion, ADD_CASES, OFFSETS, lambda case: {"padding_idx": case[2]})
    import course_embed as ce
    for (v, d, pad, b, s, dtype), r in zip(ADD_CASES, got.ok("AddFusion")):
        label = f"AddFusion({v}, {d}, padding_idx={pad}) on {dtype} ({b}, {s}) ids"
        assert r["pad"] == pad, f"{label}: pass padding_idx to nn.Embedding"
        ref = ce.TransformerEmbedding(v, d, "sinusoidal", "add", dropout=0.0, padding_idx=pad).to(dtype)
        with torch.no_grad():
            ref.token.weight.copy_(as_tensor(r["weight"], "token.weight"))
        for offset, out in zip(OFFSETS, r["outs"]):
            out = as_tensor(out, f"{label}, offset {offset}")
            assert out.dtype == dtype, f"{label}: the output must be {dtype}"
            torch.testing.assert_close(out, ref(r["ids"].data, offset), rtol=1e-5, atol=1e-5,
                                       msg=lambda m: f"{label}, offset {offset}: {m}")


def _unbatched(AddFusion):
    model = AddFusion(10, 4)
    errors = []
    for bad in (torch.tensor([1, 2, 3]), torch.zeros(2, 3, 1, dtype=torch.long)):
        try:
            model(bad)
            errors.append("")
        except Exception as err:
            errors.append(type(err).__name__)
    return errors


@test("q1", points=1, hidden=True)
def add_fusion_rejects_unbatched_ids(AddFusion):
    got = yield run(_unbatched, AddFusion)
    for shape, error in zip(((3,), (2, 3, 1)), got.ok("AddFusion(10, 4)")):
        assert error == "ValueError", f"ids of shape {shape} must raise ValueError, got {error or 'no error'}"


CONCAT_CASES = [(40, 16, None, 0, 2, 5, torch.float32), (40, 10, 2, None, 3, 4, torch.float32),
                (7, 12, 10, 6, 1, 600, torch.float32)]


@test("q2", points=1, hidden=True)
def concat_fusion_matches_reference(ConcatFusion):
    got = yield run(_cases, ConcatFusion, CONCAT_CASES, (0, 17),
                    lambda case: {"d_position": case[2], "padding_idx": case[3]})
    import course_embed as ce
    for (v, d, dp, pad, b, s, dtype), r in zip(CONCAT_CASES, got.ok("ConcatFusion")):
        label = f"ConcatFusion({v}, {d}, d_position={dp}, padding_idx={pad})"
        ref = ce.TransformerEmbedding(v, d, "sinusoidal", "concat", dropout=0.0, padding_idx=pad, d_position=dp)
        weight = as_tensor(r["weight"], "token.weight")
        shape = tuple(ref.token.weight.shape)
        assert tuple(weight.shape) == shape, f"{label}: the token table must be {shape}"
        with torch.no_grad():
            ref.token.weight.copy_(weight)
        for offset, out in zip((0, 17), r["outs"]):
            torch.testing.assert_close(as_tensor(out, label), ref(r["ids"].data, offset), rtol=1e-5, atol=1e-5,
                                       msg=lambda m: f"{label}, offset {offset}: {m}")


@test("q2", points=1, hidden=True)
def concat_fusion_rejects_bad_widths(ConcatFusion):
    widths = (0, 16, -2, 3)
    got = yield [run(ConcatFusion, 10, 16, d_position=dp) for dp in widths]
    for dp, out in zip(widths, got):
        out.raises(f"ConcatFusion(10, 16, d_position={dp})", ValueError)


def _attention(key_padding_mask):
    gen = torch.Generator().manual_seed(6)
    ids = torch.randint(1, 30, (4, 9), generator=gen)
    ids[0, 6:], ids[2, 3:], ids[3, 8] = 0, 0, 0
    kept = ids.clone()
    return {"ids": kept, "mask32": key_padding_mask(ids.int(), 0), "mask": key_padding_mask(ids, 0),
            "unchanged": torch.equal(ids, kept)}


@test("q3", points=1, hidden=True)
def mask_hides_pads_from_attention(key_padding_mask):
    got = yield [run(_attention, key_padding_mask), run(key_padding_mask, torch.zeros(2, 3), 0)]
    r = got[0].ok("key_padding_mask")
    assert r["unchanged"], "key_padding_mask must not modify ids"
    ids = r["ids"].data
    for key in ("mask", "mask32"):
        mask = as_tensor(r[key], "key_padding_mask(ids, 0)")
        assert mask.dtype == torch.bool and torch.equal(mask, ids == 0), f"wrong mask for {key[4:] or 'int64'} ids"
    gen = torch.Generator().manual_seed(6)
    attn = torch.nn.MultiheadAttention(12, 3, batch_first=True)
    x = torch.randn(4, 9, 12, generator=gen)
    y = x.clone()
    y[ids == 0] = torch.randn(int((ids == 0).sum()), 12, generator=gen)
    mask = as_tensor(r["mask"], "mask")
    out_x, _ = attn(x, x, x, key_padding_mask=mask)
    out_y, _ = attn(y, y, y, key_padding_mask=mask)
    torch.testing.assert_close(out_x[ids != 0], out_y[ids != 0], rtol=1e-5, atol=1e-6)
    got[1].raises("key_padding_mask(float ids, 0)", TypeError)


@test("q4", points=1, hidden=True)
def mean_abs_cos_for_several_seeds(mean_abs_cos):
    seeds = (0, 3)
    got = yield [run(mean_abs_cos, s) for s in seeds]
    import course_embed as ce
    for seed, out in zip(seeds, got):
        value = out.number(f"mean_abs_cos({seed})")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            tokens = torch.nn.Embedding(1000, 512).weight.detach()[:100].double()
        positions = ce.sinusoidal_table(100, 512, dtype=torch.float64)
        expected = torch.nn.functional.cosine_similarity(tokens, positions, dim=-1).abs().mean().item()
        assert abs(value - expected) <= 0.000051, f"mean_abs_cos({seed}) is off by more than the 4 decimals asked"
