"""Public tests of exercise 01 (what `grader.check` runs). Format: course_embed/tools/grading/probe.py.

The inputs are fixed here, and each expected value is stored or follows from a known table by indexing."""

import math

import torch

from course_embed.tools.grading.probe import Tensor, as_tensor, run, test

TRIED = "(grading also tries other sizes, dtypes and pad ids)"


def _init_in_place(init_embedding_):
    w = torch.nn.Parameter(torch.full((2000, 64), 3.0))
    returned = init_embedding_(w, padding_idx=0)
    return {"returned": returned, "weight": w}


@test("q1", points=1)
def init_in_place_with_the_right_std(init_embedding_):
    got = yield run(_init_in_place, init_embedding_)
    label = "init_embedding_(w, padding_idx=0) on a (2000, 64) Parameter"
    if got.raised and "leaf Variable" in got.message:
        raise AssertionError(f"{label} raised RuntimeError: a Parameter changes in place only under torch.no_grad()")
    result = got.ok(label)
    w = as_tensor(result["weight"], "the Parameter passed in")
    assert not torch.all(w == 3.0), f"{label} left the Parameter unchanged: fill `weight` itself, in place"
    returned = as_tensor(result["returned"], f"{label} (its return value)")
    assert returned.shape == w.shape and torch.equal(returned, w), f"{label} must return the Parameter it filled"
    assert torch.all(w[0] == 0), f"{label}: row 0 is not zero; zero row padding_idx after the random init"
    std = w[1:].std().item()
    if abs(std - 1 / 64) < 0.05 / 64:
        raise AssertionError(
            f"{label}: the rows' std is {std:.4f}, expected d_model ** -0.5 = 0.1250; {std:.4f} is 1 / d_model, the "
            f"variance: normal_'s second argument is the standard deviation {TRIED}"
        )
    if abs(std - 2000**-0.5) < 0.05 * 2000**-0.5:
        raise AssertionError(
            f"{label}: the rows' std is {std:.4f}, expected d_model ** -0.5 = 0.1250; {std:.4f} is vocab_size ** -0.5: "
            f"d_model is weight.shape[1] {TRIED}"
        )
    assert abs(std - 0.125) < 0.05 * 0.125, (
        f"{label}: the rows' std is {std:.4f}, expected d_model ** -0.5 = 0.1250: N(0, 1/d_model) depends on the "
        f"width only (not Xavier's fan-in and fan-out) {TRIED}"
    )
    within = (w[1:].abs() < 0.125).double().mean().item()  # 0.683 for a normal, 0.577 for a uniform
    assert abs(within - 0.6827) < 0.02, (
        f"{label}: {within:.3f} of the samples lie within one std, a normal has 0.683: sample N(0, 1/d) with "
        f"normal_, not uniform_"
    )


#: A known table (10 ids, width 8) that the gathering loads into the learner's module; row 0, the pad row, is zero.
TABLE = torch.cat([torch.zeros(1, 8), torch.arange(1.0, 73.0).reshape(9, 8) / 8]).double()
IDS = torch.tensor([[0, 3, 9], [1, 1, 0]])
UPSTREAM = torch.linspace(-1.0, 1.0, 48, dtype=torch.float64).reshape(2, 3, 8)  # not zero at the pads


def _lookup(TokenEmbedding, ids):
    """TokenEmbedding(10, 8, padding_idx=0) in float64 with TABLE loaded, looking up ``ids`` and backpropagating."""
    emb = TokenEmbedding(10, 8, padding_idx=0).double()
    initial_pad = emb.weight[0].detach().clone()
    with torch.no_grad():
        emb.weight.copy_(TABLE)
    out = emb(ids)
    out.backward(UPSTREAM)
    return {"initial_pad": initial_pad, "weight": emb.weight, "out": out, "grad": emb.weight.grad}


@test("q2", points=1)
def token_embedding_scales_the_lookup_and_leaves_the_pad_row_alone(TokenEmbedding):
    got = yield [run(_lookup, TokenEmbedding, IDS), run(_lookup, TokenEmbedding, IDS.int())]
    label = "TokenEmbedding(10, 8, padding_idx=0)"
    result = got[0].ok(f"{label} on ids {IDS.tolist()}")
    if isinstance(result["weight"], Tensor) and not result["weight"].is_param:
        raise AssertionError(
            f"{label}.weight is a plain tensor: make it an nn.Parameter (then .double(), the optimizer and the "
            f"gradient reach it)"
        )
    assert torch.all(as_tensor(result["initial_pad"], "row 0") == 0), (
        f"{label}: row 0 is not zero after the constructor: initialise the weight with your init_embedding_ (if "
        f"you do, check question 1: it zeroes row padding_idx after the random init)"
    )
    weight = as_tensor(result["weight"], f"{label}.weight")
    assert weight.shape == (10, 8) and torch.equal(weight, TABLE), (
        f"{label}.weight must be the (vocab_size, d_model) Parameter forward reads (the test loads known values)"
    )
    for k, ids in enumerate((IDS, IDS.int())):
        out = as_tensor(got[k].ok(f"{label} on {ids.dtype} ids")["out"], f"{label}(ids)")
        assert out.shape == (2, 3, 8), f"{label} on (2, 3) ids must return shape (2, 3, 8), got {tuple(out.shape)}"
        assert out.dtype == torch.float64, f"{label}.double() must return float64 (the table's dtype), got {out.dtype}"
        assert torch.allclose(out, TABLE[IDS] * math.sqrt(8)), (
            f"{label} on {ids.dtype} ids must return weight[ids] * sqrt(8): the lookup, then the sqrt(d_model) scale"
        )
    grad = result["grad"]
    assert grad is not None, f"{label}: no gradient reached weight: look up the Parameter itself, not a copy"
    grad = as_tensor(grad, "weight.grad")
    assert torch.all(grad[0] == 0), (
        f"{label}: row 0 (the pad) received a gradient: pass padding_idx to F.embedding, which plain indexing lacks"
    )
    # each looked-up row gathers the upstream gradient of its positions, times sqrt(8)
    expected = {3: UPSTREAM[0, 1], 9: UPSTREAM[0, 2], 1: UPSTREAM[1, 0] + UPSTREAM[1, 1]}
    for row, value in expected.items():
        assert torch.allclose(grad[row], value * math.sqrt(8)), (
            f"{label}: the gradient of row {row} must be the sum of its positions' upstream gradients times sqrt(8)"
        )


def _bad(TokenEmbedding, ids=None, padding_idx=None):
    if ids is None:
        return TokenEmbedding(10, 4, padding_idx=padding_idx)
    return TokenEmbedding(10, 4)(ids)


def _two_tables(TokenEmbedding):
    a, b = TokenEmbedding(10, 8).double(), TokenEmbedding(10, 8).double()
    with torch.no_grad():
        a.weight.copy_(TABLE)
    before = a(IDS)
    with torch.no_grad():
        b.weight.copy_(-TABLE)
    return {"before": before, "after": a(IDS)}


@test("q2", points=1)
def token_embedding_rejects_bad_ids_and_pads_and_owns_its_table(TokenEmbedding):
    cases = [
        (torch.tensor([[1.0, 2.0]]), TypeError, "float ids: check ids.dtype is torch.int64 or torch.int32"),
        (torch.tensor([[3, -1]]), ValueError, "a negative id: plain indexing would wrap -1 to the last row"),
        (torch.tensor([[10]]), ValueError, "id 10 >= vocab_size: check ids.max() < vocab_size"),
    ]
    got = yield [run(_bad, TokenEmbedding, ids=ids) for ids, _, _ in cases] + [
        run(_bad, TokenEmbedding, padding_idx=10),
        run(_two_tables, TokenEmbedding),
        run(_bad, TokenEmbedding, padding_idx=-1),
    ]
    for (ids, error, why), out in zip(cases, got):
        out.raises(f"TokenEmbedding(10, 4)({ids.tolist()}) ({why})", error)
    got[3].raises(
        "TokenEmbedding(10, 4, padding_idx=10) (a pad id outside [0, vocab_size): check it in __init__)", ValueError
    )
    got[5].raises(
        "TokenEmbedding(10, 4, padding_idx=-1) (a negative pad id: nn.Embedding reads -1 as the last row, the "
        "question asks for [0, vocab_size): check padding_idx >= 0 in __init__)",
        ValueError,
    )
    two = got[4].ok("two TokenEmbedding(10, 8) modules")
    label = "two TokenEmbedding(10, 8) modules, the first loaded with a known table"
    before, after = as_tensor(two["before"], label), as_tensor(two["after"], label)
    assert before.shape == (2, 3, 8), f"{label}: its output must have shape (2, 3, 8), got {tuple(before.shape)}"
    factor = (before.norm() / TABLE[IDS].norm()).item()  # the scale is the other test's: any positive one here
    assert factor > 0 and torch.allclose(before, TABLE[IDS] * factor), (
        f"{label}: the first's output is not its table's rows (weight[ids] times the scale)"
    )
    assert after.shape == before.shape and torch.allclose(after, before), (
        "two TokenEmbedding(10, 8) modules share one table: changing the second changed the first's output "
        "(make a new nn.Parameter in each __init__)"
    )


@test("q3", points=1)
def mean_row_norm_for_seed_1(mean_row_norm):
    got = yield run(mean_row_norm, 1)
    value = got.number("mean_row_norm(1)")
    assert abs(value - 22.6458) <= 0.0051, (
        f"mean_row_norm(1) is {value:.4f}, expected 22.65 to 2 decimals: nn.Embedding(1000, 512) right after "
        f"torch.manual_seed(1), rows' Euclidean norms (dim=1), then their mean (grading tries other seeds)"
    )


#: The truncated normal N(0, 0.02^2) cut at 2 standard deviations: its standard deviation, 0.02 * 0.879626 (the
#: normal's std times sqrt(1 - 2 c phi(c) / (2 Phi(c) - 1)) at c = 2), and the share of its samples within one std
#: of 0, P(|z| < 1) / P(|z| < 2)
TRUNCATED_STD = 0.0175925132
TRUNCATED_WITHIN_ONE_STD = 0.7152328


def _truncated_in_place(init_truncated_, padding_idx=0, shape=(4000, 64), dtype=torch.float32):
    """The Parameter filled, its return value, and the tensor it is a view of (rows 1 to -2): filled in place, that
    tensor changes too; values put into a new tensor (``weight.data = ...``) leave it as it was."""
    backing = torch.full((shape[0] + 2, shape[1]), 3.0, dtype=dtype)
    w = torch.nn.Parameter(backing[1:-1])
    returned = init_truncated_(w, 0.02, 2.0, padding_idx=padding_idx)
    return {"returned": returned, "weight": w, "backing": backing}


#: The two tables the first test fills: (padding_idx, shape, dtype)
_IN_PLACE_CASES = [(0, (4000, 64), torch.float32), (5, (200, 16), torch.float64)]


@test("q4", points=0.25)
def truncated_init_in_place_with_the_pad_row_zero(init_truncated_):
    got = yield [run(_truncated_in_place, init_truncated_, *case) for case in _IN_PLACE_CASES]
    labels = [
        f"init_truncated_(w, 0.02, 2.0, padding_idx={pad}) on a ({v}, {d}) {str(dtype)[6:]} Parameter"
        for pad, (v, d), dtype in _IN_PLACE_CASES
    ]
    tables = []
    for (_, _, dtype), label, out in zip(_IN_PLACE_CASES, labels, got, strict=True):  # the dtypes first
        if out.raised and "leaf Variable" in out.message:
            raise AssertionError(
                f"{label} raised RuntimeError: a Parameter changes in place only under torch.no_grad()"
            )
        result = out.ok(label)
        w = as_tensor(result["weight"], "the Parameter passed in")
        assert w.dtype == dtype, f"{label}: the Parameter must keep its dtype {dtype}, got {w.dtype}"
        tables.append((result, w))
    for (pad, (v, _), _), label, (result, w) in zip(_IN_PLACE_CASES, labels, tables, strict=True):
        assert not torch.all(w == 3.0), f"{label} left the Parameter unchanged: fill `weight` itself, in place"
        returned = as_tensor(result["returned"], f"{label} (its return value)")
        assert returned.shape == w.shape and torch.equal(returned, w), f"{label} must return the Parameter it filled"
        backing = as_tensor(result["backing"], "the tensor the Parameter is a view of")
        assert backing.shape == (v + 2, w.shape[1]) and torch.equal(backing[1:-1], w), (
            f"{label}: the values went into new storage, not the Parameter's own (weight.data = ... or set_ "
            f"replaces it): fill it in place with in-place methods (normal_, copy_, masked indexing)"
        )
        assert torch.all(w[pad] == 0), f"{label}: row {pad} is not zero; zero row padding_idx after the random init"
        assert not torch.all(w[pad + 1] == 0), f"{label}: row {pad + 1} is zero; only row padding_idx is"


@test("q4", points=0.5)
def truncated_init_is_a_truncated_normal(init_truncated_):
    got = yield run(_truncated_in_place, init_truncated_, None)
    label = "init_truncated_(w, 0.02, 2.0) on a (4000, 64) float32 Parameter"
    w = as_tensor(got.ok(label)["weight"], "the Parameter passed in").double()
    largest, std = w.abs().max().item(), w.std().item()
    if abs(std - 0.02) < 0.03 * 0.02 and largest <= 0.04 * 0.02 / TRUNCATED_STD * (1 + 1e-3):
        raise AssertionError(
            f"{label}: the values' std is {std:.5f} and they stop at +-{largest:.4f}: truncated values rescaled to "
            f"std 0.02; the truncated normal keeps its narrower std, {TRUNCATED_STD:.5f} (do not rescale it)"
        )
    assert largest <= 0.04 * (1 + 1e-6), (
        f"{label} holds values up to {largest:.4f} in magnitude, outside [-0.04, 0.04] = +-cutoff * std: every "
        f"sample beyond cutoff standard deviations is re-drawn (if you used nn.init.trunc_normal_, its a and b are "
        f"absolute bounds, not multiples of std)"
    )
    on_bounds = (w.abs() >= 0.04 * (1 - 1e-6)).double().mean().item()
    assert on_bounds < 0.005, (
        f"{label}: {on_bounds:.1%} of the values sit on the bounds +-0.04: clamping piles the normal's tails there; "
        f"a truncated normal re-draws them instead"
    )
    assert abs(std - TRUNCATED_STD) < 0.03 * TRUNCATED_STD, (
        f"{label}: the values' std is {std:.5f}, expected {TRUNCATED_STD:.5f}, that of N(0, 0.02^2) restricted to "
        f"[-0.04, 0.04]"
    )
    within = (w.abs() < 0.02).double().mean().item()
    assert abs(within - TRUNCATED_WITHIN_ONE_STD) < 0.02, (
        f"{label}: {within:.3f} of the values lie within one std (0.02) of 0, the truncated normal has "
        f"{TRUNCATED_WITHIN_ONE_STD:.3f}: draw from the normal, then drop and re-draw the values beyond the bounds"
    )


@test("q4", points=0.25)
def truncated_std_for_bert(truncated_std):
    got = yield run(truncated_std, 0.02, 2.0, 1)
    label = "truncated_std(0.02, 2.0, 1)"
    value = got.number(label)
    if abs(value - 0.02) < 1e-4:
        raise AssertionError(
            f"{label} is {value:.5f}, the std of the normal before truncation: measure the standard deviation of the "
            f"filled (30522, 768) table's entries, which truncation makes smaller"
        )
    assert abs(value - TRUNCATED_STD) <= 1e-3 * TRUNCATED_STD, (
        f"{label} is {value:.6f}, expected {TRUNCATED_STD:.6f} to within 0.1%: right after torch.manual_seed(1), a "
        f"(30522, 768) float32 table filled by init_truncated_(w, 0.02, 2.0), then the std of all its entries"
    )
