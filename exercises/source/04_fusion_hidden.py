"""Hidden tests of exercise 04: the instructor's only (not in a release). Each test draws its inputs from the grading
run's secret `seed` and gathers the answers' outputs before its `yield` (in the sandbox); after it, in the grader,
it rebuilds the same inputs and compares with course_embed's reference."""

import torch

from course_embed.tools.grading.probe import as_tensor, between, choose, run, test


def _inputs(case):
    """The known token table and ids of one case (rebuilt on both sides from the case's own seed)."""
    v, width, pad, b, s, dtype, data_seed = case
    gen = torch.Generator().manual_seed(data_seed)
    table = torch.randn(v, width, generator=gen, dtype=dtype)
    if pad is not None:
        table[pad] = 0
    return table, torch.randint(0, v, (b, s), generator=gen)


def _add_cases(seed):
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype, s in ((torch.float32, between(gen, 1, 40)), (torch.float64, between(gen, 500, 900))):
        v, d = between(gen, 2, 300), 2 * between(gen, 1, 24)
        cases.append((v, d, choose(gen, [None, between(gen, 0, v - 1)]), between(gen, 1, 3), s, dtype,
                      between(gen, 0, 2**31)))
    return cases, (0, between(gen, 1, 50), between(gen, 500, 3000))


def _fused(Model, case, width, offsets, **kwargs):
    table, ids = _inputs((case[0], width, *case[2:]))
    model = Model(case[0], case[1], padding_idx=case[2], **kwargs).to(case[5])
    with torch.no_grad():
        model.token.weight.copy_(table)
    outs = [model(ids, offset) for offset in offsets]
    outs[0].sum().backward()
    return {"outs": outs, "grad": model.token.weight.grad}


def _reference(case, width, offsets, d_position=None):
    """The expected outputs at each offset (float64) and the token table's gradient of the first one's sum."""
    import math

    import course_embed as ce

    v, d, pad, b, s, _, _ = case
    table, ids = _inputs((v, width, *case[2:]))
    w = table.double().requires_grad_()
    tokens = torch.nn.functional.embedding(ids, w, pad) * math.sqrt(width)
    outs = []
    for offset in offsets:
        pe = ce.sinusoidal_table(offset + s, d_position or d, dtype=torch.float64)[offset:]
        outs.append(torch.cat([tokens, pe.expand(b, -1, -1)], dim=-1) if d_position else tokens + pe)
    outs[0].sum().backward()
    return [o.detach() for o in outs], w.grad


def _compare(label, r, outs, grad, offsets, dtype):
    for offset, out, expected in zip(offsets, r["outs"], outs):
        out = as_tensor(out, f"{label}, offset {offset}")
        assert out.dtype == dtype, f"{label}, offset {offset}: the output must be {dtype}, got {out.dtype}"
        assert out.shape == expected.shape, f"{label}, offset {offset}: expected shape {tuple(expected.shape)}"
        error = (out.double() - expected.double()).abs().max().item() if out.numel() else 0.0
        tol = 1e-9 if dtype == torch.float64 else 1e-5
        assert error <= tol, (
            f"{label}, offset {offset}: off by up to {error:.1e} from the token rows times sqrt(d) with PE rows "
            f"offset .. offset + seq - 1 (each computed in float64)"
        )
    assert r["grad"] is not None, f"{label}: no gradient reached the token table"
    found = as_tensor(r["grad"], "token.weight.grad").double()
    assert found.shape == grad.shape, f"{label}: token.weight.grad must have the table's shape {tuple(grad.shape)}"
    pad_rows = (grad.abs().sum(dim=1) == 0) & (found.abs().sum(dim=1) != 0)
    assert not pad_rows.any() or torch.allclose(found[~pad_rows], grad[~pad_rows], atol=1e-5), (
        f"{label}: row {int(pad_rows.nonzero()[0])} of the token table got a gradient it must not get (the pad row "
        f"gets none: padding_idx)"
    )
    error = (found - grad).abs().max().item()
    assert torch.allclose(found, grad, atol=1e-5), (
        f"{label}: the token table's gradient differs from the sum of its positions' upstream gradients times "
        f"sqrt(d) by up to {error:.1e}"
    )


@test("q1", points=1, hidden=True)
def add_fusion_matches_reference(AddFusion, *, seed):
    cases, offsets = _add_cases(seed)
    got = yield [run(_fused, AddFusion, case, case[1], offsets) for case in cases]
    for case, out in zip(cases, got):
        v, d, pad, b, s, dtype, _ = case
        label = f"AddFusion({v}, {d}, padding_idx={pad}).to({dtype}) on ({b}, {s}) ids"
        outs, grad = _reference(case, d, offsets)
        _compare(label, out.ok(label), outs, grad, offsets, dtype)


def _bad_ids(AddFusion, v, d, shape):
    return AddFusion(v, d)(torch.zeros(shape, dtype=torch.long))


@test("q1", points=1, hidden=True)
def add_fusion_rejects_unbatched_ids(AddFusion, *, seed):
    cases, offsets = _add_cases(seed)
    gen = torch.Generator().manual_seed(seed)
    v, d = between(gen, 2, 50), 2 * between(gen, 1, 8)
    shapes = [(between(gen, 1, 9),), (2, between(gen, 1, 5), 1)]
    got = yield [run(_fused, AddFusion, cases[0], cases[0][1], offsets)] + [
        run(_bad_ids, AddFusion, v, d, shape) for shape in shapes
    ]
    v0, d0, pad, b, s, dtype, _ = cases[0]
    label = f"AddFusion({v0}, {d0}, padding_idx={pad}) on ({b}, {s}) ids"
    _compare(label, got[0].ok(label), *_reference(cases[0], d0, offsets), offsets, dtype)
    for shape, out in zip(shapes, got[1:]):
        out.raises(f"AddFusion({v}, {d}) on ids of shape {shape}", ValueError)


def _concat_cases(seed):
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for _ in range(3):
        v, d = between(gen, 2, 80), 4 * between(gen, 1, 8)  # d // 2, the default d_position, is even
        dp = choose(gen, [None, 2 * between(gen, 1, d // 2 - 1)])
        case = (v, d, choose(gen, [None, between(gen, 0, v - 1)]), between(gen, 1, 3), between(gen, 1, 600),
                torch.float32, between(gen, 0, 2**31))
        cases.append((case, dp))
    return cases, (0, between(gen, 1, 900))


@test("q2", points=1, hidden=True)
def concat_fusion_matches_reference(ConcatFusion, *, seed):
    cases, offsets = _concat_cases(seed)
    got = yield [
        run(_fused, ConcatFusion, case, case[1] - (dp or case[1] // 2), offsets, d_position=dp) for case, dp in cases
    ]
    for (case, dp), out in zip(cases, got):
        v, d, pad, b, s, dtype, _ = case
        label = f"ConcatFusion({v}, {d}, d_position={dp}, padding_idx={pad}) on ({b}, {s}) ids"
        outs, grad = _reference(case, d - (dp or d // 2), offsets, d_position=dp or d // 2)
        _compare(label, out.ok(label), outs, grad, offsets, dtype)


@test("q2", points=1, hidden=True)
def concat_fusion_rejects_bad_widths(ConcatFusion, *, seed):
    cases, offsets = _concat_cases(seed)
    gen = torch.Generator().manual_seed(seed)
    d = 2 * between(gen, 2, 20)
    widths = (d, -2 * between(gen, 1, 4), 2 * between(gen, 1, d // 2 - 1) + 1, d + 2)
    (case, dp) = cases[0]
    got = yield [run(_fused, ConcatFusion, case, case[1] - (dp or case[1] // 2), offsets, d_position=dp)] + [
        run(ConcatFusion, 10, d, d_position=w) for w in widths
    ]
    label = f"ConcatFusion({case[0]}, {case[1]}, d_position={dp})"
    outs, grad = _reference(case, case[1] - (dp or case[1] // 2), offsets, d_position=dp or case[1] // 2)
    _compare(label, got[0].ok(label), outs, grad, offsets, case[5])
    for w, out in zip(widths, got[1:]):
        out.raises(f"ConcatFusion(10, {d}, d_position={w})", ValueError)


def _mask_ids(seed):
    gen = torch.Generator().manual_seed(seed)
    pad = between(gen, 0, 3)
    ids = torch.randint(4, 30, (between(gen, 1, 5), between(gen, 2, 12)), generator=gen)
    ids[torch.rand(ids.shape, generator=gen) < 0.3] = pad
    ids[0, -1] = pad  # at least one pad
    return ids, pad


def _mask(key_padding_mask, seed, dtype):
    ids, pad = _mask_ids(seed)
    ids = ids.to(dtype)
    mask = key_padding_mask(ids, pad)
    return {"mask": mask, "ids_after": ids}


@test("q3", points=1, hidden=True)
def mask_hides_pads_from_attention(key_padding_mask, *, seed):
    got = yield [run(_mask, key_padding_mask, seed, torch.int64), run(_mask, key_padding_mask, seed, torch.int32)]
    ids, pad = _mask_ids(seed)
    for out, dtype in zip(got, (torch.int64, torch.int32)):
        label = f"key_padding_mask({dtype} ids of shape {tuple(ids.shape)}, {pad})"
        r = out.ok(label)
        mask = as_tensor(r["mask"], label)
        assert mask.dtype == torch.bool and torch.equal(mask, ids == pad), f"{label} is not True exactly at the pads"
        assert torch.equal(as_tensor(r["ids_after"], "ids").long(), ids), f"{label} changed ids: leave them unchanged"
    gen = torch.Generator().manual_seed(seed)
    attn = torch.nn.MultiheadAttention(12, 3, batch_first=True)
    x = torch.randn(*ids.shape, 12, generator=gen)
    y = x.clone()
    y[ids == pad] = torch.randn(int((ids == pad).sum()), 12, generator=gen)
    keep = (ids != pad).any(dim=1)  # a row of pads only has no key to attend to
    mask = as_tensor(got[0].ok("key_padding_mask")["mask"], "mask")[keep]
    out_x, _ = attn(x[keep], x[keep], x[keep], key_padding_mask=mask)
    out_y, _ = attn(y[keep], y[keep], y[keep], key_padding_mask=mask)
    real = ids[keep] != pad
    assert torch.allclose(out_x[real], out_y[real], atol=1e-6), "with the mask, attention must not see the pads"
    # the TypeError for float ids is graded by the public check mask_refuses_float_ids


@test("q4", points=1, hidden=True)
def mean_abs_cos_for_other_seeds(mean_abs_cos, *, seed):
    gen = torch.Generator().manual_seed(seed)
    seeds = (between(gen, 2, 10**6), between(gen, 2, 10**6))
    got = yield [run(mean_abs_cos, s) for s in seeds]
    import course_embed as ce

    for s, out in zip(seeds, got):
        value = out.number(f"mean_abs_cos({s})")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(s)
            tokens = torch.nn.Embedding(1000, 512).weight.detach()[:100].double()
        positions = ce.sinusoidal_table(100, 512, dtype=torch.float64)
        expected = torch.nn.functional.cosine_similarity(tokens, positions, dim=-1).abs().mean().item()
        assert abs(value - expected) <= 0.000051, (
            f"mean_abs_cos({s}) is {value:.5f}, expected {expected:.4f} to the 4 decimals asked (the seed set inside "
            f"the function?)"
        )


def _roberta_reference(ids, padding_idx, offset=0):
    """RoBERTa's position ids (Hugging Face's create_position_ids_from_input_ids): the k-th real token of each
    sequence at padding_idx + offset + k, every pad at padding_idx."""
    real = (ids != padding_idx).long()
    return (real.cumsum(dim=1) + offset) * real + padding_idx


def _padded_batch(seed):
    """A batch of sequences padded on the right, on the left or inside, with pad id ``padding_idx``."""
    gen = torch.Generator().manual_seed(seed + 5)
    padding_idx, batch, seq = between(gen, 0, 5), between(gen, 2, 6), between(gen, 4, 30)
    ids = torch.randint(padding_idx + 1, padding_idx + 500, (batch, seq), generator=gen)
    for row in range(batch):
        pads = between(gen, 0, seq - 1)
        where = choose(gen, ["left", "right", "inside"])
        if where == "left":
            ids[row, :pads] = padding_idx
        elif where == "right":
            ids[row, seq - pads :] = padding_idx
        else:
            ids[row, torch.randperm(seq, generator=gen)[:pads]] = padding_idx
    dtype = choose(gen, [torch.int64, torch.int32])
    return ids.to(dtype), padding_idx, between(gen, 1, 600)


def _roberta(roberta_positions, ids, padding_idx, **kwargs):
    out = roberta_positions(ids, padding_idx, **kwargs)
    return {"out": out, "ids_after": ids}


@test("q5", points=0.5, hidden=True)
def roberta_positions_match_reference(roberta_positions, *, seed):
    ids, padding_idx, _ = _padded_batch(seed)
    got = yield run(_roberta, roberta_positions, ids.clone(), padding_idx)
    label = f"roberta_positions(({tuple(ids.shape)} {ids.dtype} ids), {padding_idx})"
    r = got.ok(label)
    assert torch.equal(as_tensor(r["ids_after"], "ids"), ids), f"{label} changed ids"
    found = as_tensor(r["out"], label)  # its dtype is roberta_positions_are_int64's
    assert tuple(found.shape) == tuple(ids.shape) and not found.is_floating_point(), (
        f"{label} must return integer positions of ids' shape, got {found.dtype} {tuple(found.shape)}"
    )
    wrong = (found.long() != _roberta_reference(ids.long(), padding_idx)).sum().item()
    assert wrong == 0, f"{label}: {wrong} positions differ from RoBERTa's numbering"


@test("q5", points=0.25, hidden=True)
def roberta_positions_are_int64(roberta_positions, *, seed):
    ids, padding_idx, _ = _padded_batch(seed)
    got = yield [run(_roberta, roberta_positions, ids.to(dtype), padding_idx) for dtype in (torch.int32, torch.int64)]
    for dtype, out in zip((torch.int32, torch.int64), got):
        label = f"roberta_positions(({tuple(ids.shape)} {dtype} ids), {padding_idx})"
        found = as_tensor(out.ok(label)["out"], label)
        # only the dtype, of positions (of ids' shape, not all equal) whatever their values
        assert tuple(found.shape) == tuple(ids.shape) and found.unique().numel() > 1, (
            f"{label} must return positions of ids' shape, not all equal"
        )
        assert found.dtype == torch.int64, f"{label} must return int64 positions, got {found.dtype}"


@test("q5", points=0.25, hidden=True)
def roberta_positions_shift_by_the_offset(roberta_positions, *, seed):
    ids, padding_idx, offset = _padded_batch(seed)
    got = yield run(_roberta, roberta_positions, ids.clone(), padding_idx, offset=offset)
    label = f"roberta_positions(({tuple(ids.shape)} ids), {padding_idx}, offset={offset})"
    found = as_tensor(got.ok(label)["out"], label).long()
    assert tuple(found.shape) == tuple(ids.shape), f"{label}: keep ids' shape"
    # against RoBERTa's numbering itself, so that numbering the columns instead of the real tokens loses these
    # points too: the offset is the question's reason to count real tokens
    wrong = (found != _roberta_reference(ids.long(), padding_idx, offset)).sum().item()
    assert wrong == 0, (
        f"{label}: {wrong} positions differ from RoBERTa's numbering with an offset: the k-th real token of a "
        f"row at padding_idx + offset + k (k from 1), every pad at padding_idx"
    )


@test("q5", points=0.25, hidden=True)
def roberta_positions_refuse_other_ranks(roberta_positions, *, seed):
    ids, padding_idx, _ = _padded_batch(seed)
    got = yield [run(_roberta, roberta_positions, ids.clone(), padding_idx),
                 run(roberta_positions, ids[0].clone(), padding_idx),
                 run(roberta_positions, ids[None].clone(), padding_idx)]
    label = f"roberta_positions(({tuple(ids.shape)} ids), {padding_idx})"
    found = as_tensor(got[0].ok(label)["out"], label)
    # not the values (roberta_positions_match_reference grades them), only that 2-D ids get positions of their
    # shape, not all equal
    assert tuple(found.shape) == tuple(ids.shape) and found.unique().numel() > 1, (
        f"{label} must return positions of ids' shape, not all equal"
    )
    got[1].raises(f"roberta_positions(1-D ids, {padding_idx})", ValueError)
    got[2].raises(f"roberta_positions(3-D ids, {padding_idx})", ValueError)
