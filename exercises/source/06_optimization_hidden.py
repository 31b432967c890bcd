"""Hidden tests of exercise 06: the instructor's only (not in a release). Each test gathers the answers' outputs
before its `yield` (in the sandbox) and compares them with course_embed's reference after it (in the grader)."""

import torch

from course_embed.tools.grading.probe import Tensor, as_tensor, run, test

CASES = [(50, 16, 3, 7, 0, torch.float32), (9, 6, 1, 1, None, torch.float64), (300, 33, 2, 40, 299, torch.float32)]


def _lookup_cases(lookup_add):
    gen = torch.Generator().manual_seed(8)
    found = []
    for v, d, b, s, pad, dtype in CASES:
        ids = torch.randint(0, v, (b, s), generator=gen)
        ids[0, 0] = pad if pad is not None else 1
        w = torch.randn(v, d, generator=gen, dtype=dtype).requires_grad_()
        pe = torch.randn(s, d, generator=gen, dtype=dtype).requires_grad_()
        upstream = torch.randn(b, s, d, generator=gen, dtype=dtype)
        kept = (ids.clone(), w.detach().clone(), pe.detach().clone())
        out = lookup_add(ids, w, pe, d ** 0.5, pad)
        out_copy = out.detach().clone()
        out.backward(upstream)
        unchanged = all(torch.equal(a, b) for a, b in zip(kept, (ids, w.detach(), pe.detach())))
        found.append({"ids": kept[0], "w": kept[1], "pe": kept[2], "upstream": upstream, "out": out_copy,
                      "w_grad": w.grad, "pe_grad": pe.grad, "unchanged": unchanged})
    return found


@test("q1", points=1, hidden=True)
def lookup_add_matches_reference(lookup_add):
    got = yield run(_lookup_cases, lookup_add)
    from course_embed.fusion import lookup_add_reference
    for (v, d, b, s, pad, dtype), r in zip(CASES, got.ok("lookup_add")):
        label = f"lookup_add on ({b}, {s}) ids, a ({v}, {d}) {dtype} table, padding_idx={pad}"
        w = r["w"].data.clone().requires_grad_()
        pe = r["pe"].data.clone().requires_grad_()
        expected = lookup_add_reference(r["ids"].data, w, pe, d ** 0.5, pad)
        out = as_tensor(r["out"], label)
        assert out.dtype == dtype, f"{label}: the output must be {dtype}"
        torch.testing.assert_close(out, expected.detach(), rtol=1e-5, atol=1e-5, msg=lambda m: f"{label}: {m}")
        expected.backward(r["upstream"].data)
        torch.testing.assert_close(as_tensor(r["w_grad"], "weight.grad"), w.grad, rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"{label}: the gradient of weight: {m}")
        torch.testing.assert_close(as_tensor(r["pe_grad"], "pe.grad"), pe.grad, rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"{label}: the gradient of pe: {m}")


@test("q1", points=1, hidden=True)
def lookup_add_leaves_its_inputs_alone(lookup_add):
    got = yield run(_lookup_cases, lookup_add)
    for (v, d, b, s, pad, dtype), r in zip(CASES, got.ok("lookup_add")):
        assert r["unchanged"], "lookup_add must not modify ids, weight or pe (only the lookup's own output)"


def _sparse(sparse_embedding_grad, ids, grad_out, vocab, padding_idx=None):
    with torch.sparse.check_sparse_tensor_invariants():  # bad indices raise instead of corrupting memory
        kept = grad_out.clone()
        result = sparse_embedding_grad(ids, grad_out, vocab, padding_idx)
        return {"grad": result, "unchanged": torch.equal(kept, grad_out)}


SPARSE_CASES = [(1000, 8, 4, 50, 0, torch.float32), (7, 3, 2, 9, None, torch.float64),
                (30, 5, 3, 11, 29, torch.float32)]


def _sparse_inputs():
    gen = torch.Generator().manual_seed(9)
    for v, d, b, s, pad, dtype in SPARSE_CASES:
        ids = torch.randint(0, v, (b, s), generator=gen)
        ids[0, :2] = pad if pad is not None else 3
        yield ids, torch.randn(b, s, d, generator=gen, dtype=dtype), v, pad


@test("q2", points=1, hidden=True)
def sparse_grad_matches_reference(sparse_embedding_grad):
    got = yield [run(_sparse, sparse_embedding_grad, ids.to(id_dtype), grad_out, v, pad)
                 for ids, grad_out, v, pad in _sparse_inputs() for id_dtype in (torch.int64, torch.int32)]
    import torch.nn.functional as F
    outs = iter(got)
    for ids, grad_out, v, pad in _sparse_inputs():
        w = torch.zeros(v, grad_out.shape[-1], dtype=grad_out.dtype, requires_grad=True)
        F.embedding(ids, w, pad, sparse=True).backward(grad_out)
        expected = w.grad.coalesce()
        for id_dtype in ("int64", "int32"):
            label = f"sparse_embedding_grad({id_dtype} ids, vocab_size={v}, padding_idx={pad})"
            r = next(outs).ok(label)
            assert r["unchanged"], f"{label} must not modify grad_out"
            value = r["grad"]
            assert isinstance(value, Tensor) and value.sparse, f"{label}: return a sparse COO tensor"
            assert value.coalesced and tuple(value.data.shape) == (v, grad_out.shape[-1]), \
                f"{label}: a coalesced ({v}, {grad_out.shape[-1]}) tensor"
            assert value.data.dtype == grad_out.dtype, f"{label}: in grad_out's dtype"
            assert torch.equal(value.data._indices(), expected.indices()), \
                f"{label}: store exactly the rows the ids touch, without the pad row"
            torch.testing.assert_close(value.data._values(), expected.values(), rtol=1e-6, atol=1e-6)


@test("q2", points=1, hidden=True)
def sparse_grad_rejects_bad_ids(sparse_embedding_grad):
    grad_out = torch.ones(1, 2, 3)
    cases = [(torch.tensor([[1.0, 2.0]]), TypeError), (torch.tensor([[1, -1]]), ValueError),
             (torch.tensor([[1, 10]]), ValueError)]
    got = yield [run(_sparse, sparse_embedding_grad, bad, grad_out, 10) for bad, _ in cases]
    for (bad, error), out in zip(cases, got):
        out.raises(f"sparse_embedding_grad(ids={bad.tolist()}, vocab_size=10)", error)


@test("q3", points=1, hidden=True)
def sparse_fraction_for_several_seeds(sparse_fraction):
    seeds = (0, 4)
    got = yield [run(sparse_fraction, s) for s in seeds]
    import torch.nn.functional as F

    from course_embed.lab.bench import tensor_bytes
    for seed, out in zip(seeds, got):
        value = out.number(f"sparse_fraction({seed})")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            ids = torch.randint(0, 32000, (8, 256))
        weight = torch.zeros(32000, 512, requires_grad=True)
        F.embedding(ids, weight, sparse=True).sum().backward()
        expected = tensor_bytes(weight.grad.coalesce()) / tensor_bytes(weight.detach())
        assert abs(value - expected) <= 0.000051, f"sparse_fraction({seed}) is off by more than the 4 decimals asked"
