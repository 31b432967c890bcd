"""Hidden tests of exercise 01: the instructor's only (not in a release). Each test gathers the answers' outputs
before its `yield` (in the sandbox) and compares them with course_embed's reference after it (in the grader)."""

import torch

from course_embed.tools.grading.probe import run, test

INIT_CASES = [(3000, 32, 7, torch.float32), (500, 256, None, torch.float64), (4001, 17, 4000, torch.float16)]


def _init(init_embedding_, v, d, pad, dtype):
    torch.manual_seed(1)
    w = torch.nn.Parameter(torch.full((v, d), 5.0, dtype=dtype))
    out = init_embedding_(w, pad)
    return {"same": out is w, "weight": w}


@test("q1", points=2, hidden=True)
def init_matches_the_distribution(init_embedding_):
    got = yield [run(_init, init_embedding_, *case) for case in INIT_CASES]
    for (v, d, pad, dtype), out in zip(INIT_CASES, got):
        result = out.ok(f"init_embedding_ on a ({v}, {d}) {dtype} Parameter")
        assert result["same"], "return the tensor you were given"
        w = result["weight"].data
        assert w.dtype == dtype, f"the table must keep its dtype {dtype}, got {w.dtype}"
        rows = w.double()
        zero = (rows == 0).all(dim=1)
        assert zero.tolist() == [i == pad for i in range(v)], f"({v}, {d}, pad={pad}): only row padding_idx is zero"
        keep = rows[~zero]
        std = d ** -0.5
        assert abs(keep.std().item() - std) < 0.03 * std, (v, d, keep.std().item(), std)
        assert abs(keep.mean().item()) < 5 * std / keep.numel() ** 0.5, "mean is not 0"
        within = (keep.abs() < std).double().mean().item()  # 0.6827 for a normal, 0.577 for a uniform
        assert abs(within - 0.6827) < 0.02, f"not normally distributed: {within:.3f} within one std"


EMB_CASES = [(50, 16, 3, (4, 7), torch.float32), (7, 5, None, (3,), torch.float64),
             (1000, 33, 999, (2, 3, 5), torch.float32)]


def _embed(TokenEmbedding, v, d, pad, shape, dtype):
    gen = torch.Generator().manual_seed(11)
    torch.manual_seed(2)
    emb = TokenEmbedding(v, d, padding_idx=pad).to(dtype)
    twin = TokenEmbedding(v, d, padding_idx=pad)
    ids = torch.randint(0, v, shape, generator=gen)
    if pad is not None:
        ids.view(-1)[0] = pad
    upstream = torch.randn(*shape, d, generator=gen, dtype=dtype)
    out64 = emb(ids)
    out64.backward(upstream)
    out32 = emb(ids.int())
    shared = emb.weight.data_ptr() == twin.weight.data_ptr()
    return {"weight": emb.weight, "ids": ids, "upstream": upstream, "out": out64, "out_int32": out32,
            "grad": emb.weight.grad, "shared": shared}


@test("q2", points=1, hidden=True)
def token_embedding_matches_reference(TokenEmbedding):
    got = yield [run(_embed, TokenEmbedding, *case) for case in EMB_CASES]
    import torch.nn.functional as F
    for (v, d, pad, shape, dtype), out in zip(EMB_CASES, got):
        label = f"TokenEmbedding({v}, {d}, padding_idx={pad}) in {dtype}"
        r = out.ok(label)
        assert not r["shared"], f"{label}: two modules share one weight; each needs its own table"
        w, ids = r["weight"].data, r["ids"].data
        if pad is not None:
            assert torch.all(w[pad] == 0), f"{label}: the pad row must be zero after init"
        expected = F.embedding(ids, w.double(), pad) * d ** 0.5
        for key in ("out", "out_int32"):
            got_out = r[key].data
            assert got_out.dtype == dtype, f"{label}: the output must be in the table's dtype {dtype}"
            torch.testing.assert_close(got_out.double(), expected, rtol=1e-6, atol=1e-6)
        w64 = w.double().requires_grad_()
        (F.embedding(ids, w64, pad) * d ** 0.5).backward(r["upstream"].data.double())
        assert r["grad"] is not None, f"{label}: no gradient reached weight"
        torch.testing.assert_close(r["grad"].data.double(), w64.grad, rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"{label}: the gradient of weight is wrong (pad row?): {m}")


def _bad(TokenEmbedding, bad=None, pad="none"):
    if pad != "none":
        return TokenEmbedding(10, 4, padding_idx=pad)
    return TokenEmbedding(10, 4)(bad)


@test("q2", points=1, hidden=True)
def token_embedding_rejects_bad_input(TokenEmbedding):
    cases = [(torch.tensor([[1.0, 2.0]]), TypeError), (torch.tensor([[3, -1]]), ValueError),
             (torch.tensor([[10]]), ValueError), ([[1, 2]], TypeError)]
    got = yield ([run(_bad, TokenEmbedding, bad) for bad, _ in cases] +
                 [run(_bad, TokenEmbedding, pad=pad) for pad in (10, -1)])
    for (bad, error), out in zip(cases, got):
        out.raises(f"forward({bad!r})", error)
    for pad, out in zip((10, -1), got[len(cases):]):
        out.raises(f"TokenEmbedding(10, 4, padding_idx={pad})", ValueError)


@test("q3", points=1, hidden=True)
def mean_row_norm_for_several_seeds(mean_row_norm):
    seeds = (0, 7)
    got = yield [run(mean_row_norm, s) for s in seeds]
    for seed, out in zip(seeds, got):
        value = out.number(f"mean_row_norm({seed})")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            weight = torch.nn.Embedding(1000, 512).weight.detach().double()
        assert abs(value - weight.norm(dim=1).mean().item()) <= 0.0051, \
            f"mean_row_norm({seed}) is off by more than the 2 decimals asked"
