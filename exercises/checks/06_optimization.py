"""Public tests of exercise 06 (what `grader.check` runs). Format: course_embed/tools/grading/probe.py.

The inputs are fixed here; each expected value is stored, or follows from the fixed inputs by indexing and sums."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from course_embed.tools.grading.probe import Tensor, as_tensor, run, test


class NewTensors(TorchDispatchMode):
    """Records every op that returns a fresh (not in-place, not a view) tensor of ``numel`` elements (in ``ops``),
    and every one that returns a fresh tensor of shape ``table`` (in ``copies``)."""

    def __init__(self, numel, table=None):
        super().__init__()
        self.numel, self.table, self.ops, self.copies = numel, table, [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        fresh = not func._schema.is_mutable and not any(r.alias_info for r in func._schema.returns)
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if fresh and isinstance(t, torch.Tensor) and t.numel() == self.numel:
                self.ops.append(str(func))
            if fresh and isinstance(t, torch.Tensor) and self.table is not None and tuple(t.shape) == self.table:
                self.copies.append(str(func))
        return out


IDS = torch.tensor([[1, 3, 0], [2, 2, 4]])
WEIGHT = torch.arange(20, dtype=torch.float64).reshape(5, 4) / 4 - 2
PE = torch.arange(12, dtype=torch.float64).reshape(3, 4) / 8
UPSTREAM = torch.linspace(-1.0, 1.0, 24, dtype=torch.float64).reshape(2, 3, 4)


def _small(lookup_add):
    weight, pe = WEIGHT.clone().requires_grad_(), PE.clone().requires_grad_()
    with NewTensors(IDS.numel() * 4, table=tuple(WEIGHT.shape)) as mode:
        out = lookup_add(IDS, weight, pe, 2.0, padding_idx=0)
    values = out.detach().clone()
    out.backward(UPSTREAM)
    return {
        "out": values,
        "grad": weight.grad,
        "pe_grad": pe.grad,
        "ops": mode.ops,
        "copies": mode.copies,
        "after": [weight, pe],
    }


@test("q1", points=2)
def lookup_add_values_gradients_and_one_output(lookup_add):
    got = yield run(_small, lookup_add)
    label = "lookup_add(ids, weight, pe, 2.0, padding_idx=0) on (2, 3) ids, a (5, 4) float64 table"
    r = got.ok(label)
    out = as_tensor(r["out"], label)
    assert out.shape == (2, 3, 4) and out.dtype == torch.float64, (
        f"{label} must return a (2, 3, 4) float64 tensor, got {tuple(out.shape)} {out.dtype}"
    )
    assert torch.allclose(out, WEIGHT[IDS] * 2.0 + PE), f"{label}: the values must equal weight[ids] * 2.0 + pe"
    for name, before, after in zip(("weight", "pe"), (WEIGHT, PE), r["after"]):
        assert torch.equal(as_tensor(after, name), before), (
            f"{label} changed {name}: only the lookup's own output may change in place"
        )
    grad = r["grad"]
    assert grad is not None, f"{label}: no gradient reached weight: do not detach the lookup"
    grad = as_tensor(grad, "weight.grad")
    assert torch.all(grad[0] == 0), f"{label}: row 0 (padding_idx) received a gradient: pass padding_idx to F.embedding"
    expected = {1: UPSTREAM[0, 0] * 2, 3: UPSTREAM[0, 1] * 2, 2: (UPSTREAM[1, 0] + UPSTREAM[1, 1]) * 2}
    for row, value in expected.items():
        assert torch.allclose(grad[row], value), (
            f"{label}: row {row} of weight's gradient must be 2.0 times the sum of its positions' upstream gradients"
        )
    assert r["pe_grad"] is not None and torch.allclose(as_tensor(r["pe_grad"], "pe.grad"), UPSTREAM.sum(0)), (
        f"{label}: pe's gradient must be the upstream gradient summed over the batch"
    )
    copies = [str(op) for op in r["copies"]] if isinstance(r.get("copies"), list) else []
    assert not copies, (
        f"{label} made a new (vocab, d) tensor ({', '.join(copies)}): a scaled copy of the whole table on every "
        f"call moves far more memory than the output; look up first, then scale the looked-up rows in place"
    )
    ops = [str(op) for op in r["ops"]] if isinstance(r["ops"], list) else []
    assert len(ops) == 1, (
        f"{label} made {len(ops)} new (batch, seq, d) tensors ({', '.join(ops) or 'none'}); expected 1: look up, "
        f"then scale and add in place (out.mul_(scale), out.add_(pe))"
    )


def _sparse(sparse_embedding_grad, ids, grad_out, vocab, padding_idx=None):
    with torch.sparse.check_sparse_tensor_invariants():  # bad indices raise instead of corrupting memory
        return sparse_embedding_grad(ids, grad_out, vocab, padding_idx)


def _sparse_kept(sparse_embedding_grad, padding_idx):
    grad_out = GRAD_OUT.clone()
    result = _sparse(sparse_embedding_grad, SPARSE_IDS, grad_out, 5, padding_idx)
    return {"grad": result, "grad_out_after": grad_out}


SPARSE_IDS = torch.tensor([[1, 3, 1, 0]])
GRAD_OUT = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]])


@test("q2", points=1)
def sparse_grad_one_row_per_id_summed_without_the_pad_row(sparse_embedding_grad):
    got = yield [
        run(_sparse_kept, sparse_embedding_grad, 0),
        run(_sparse, sparse_embedding_grad, SPARSE_IDS.float(), GRAD_OUT, 5),
        run(_sparse, sparse_embedding_grad, torch.tensor([[1, 5, 0, 2]]), GRAD_OUT, 5),
        run(_sparse, sparse_embedding_grad, torch.tensor([[1, -1, 0, 2]]), GRAD_OUT, 5),
        run(_sparse, sparse_embedding_grad, SPARSE_IDS.int(), GRAD_OUT.double(), 5, 0),
        run(_sparse, sparse_embedding_grad, torch.tensor([[2, 2]]), torch.tensor([[[1.0, -2.0], [-1.0, 2.0]]]), 5),
    ]
    label = "sparse_embedding_grad(ids [[1, 3, 1, 0]], grad_out (1, 4, 2), 5, padding_idx=0)"
    r = got[0].ok(label)
    assert torch.equal(as_tensor(r["grad_out_after"], "grad_out"), GRAD_OUT), f"{label} changed grad_out: leave it"
    value = r["grad"]
    assert isinstance(value, Tensor) and value.sparse, (
        f"{label} must return a sparse COO tensor (torch.sparse_coo_tensor), got {type(value).__name__}"
    )
    t = value.data
    assert tuple(t.shape) == (5, 2), f"{label} must have shape (vocab_size, d) = (5, 2), got {tuple(t.shape)}"
    assert t.sparse_dim() == 1 and t._values().dim() == 2, (
        f"{label} stores single numbers ({t.sparse_dim()} indices per entry): store rows, one index per row, i.e. "
        f"indices of shape (1, nnz) and values of shape (nnz, d) (a dense tensor's .to_sparse() makes the former; "
        f"torch.sparse_coo_tensor(rows[None], values, (vocab_size, d)) the latter)"
    )
    rows = t._indices()[0].tolist()
    assert rows == sorted(set(rows)), f"{label} is not coalesced (rows {rows}): call .coalesce(), one entry per row"
    assert 0 not in rows, (
        f"{label} stores the pad row 0 (a stored zero row): leave padding_idx's entries out before building the tensor"
    )
    assert rows == [1, 3], f"{label} must store exactly rows [1, 3], the ids looked up, got {rows}"
    assert torch.equal(t._values(), torch.tensor([[6.0, 8.0], [3.0, 4.0]])), (
        f"{label}: row 1 is looked up twice, so its values must be the sum of both output gradients, [6, 8]"
    )
    got[1].raises("sparse_embedding_grad(float ids, ...)", TypeError)
    got[2].raises("sparse_embedding_grad(ids with 5 >= vocab_size, ...)", ValueError)
    got[3].raises("sparse_embedding_grad(ids with -1 < 0, ...)", ValueError)
    label = "sparse_embedding_grad(int32 ids [[1, 3, 1, 0]], float64 grad_out (1, 4, 2), 5, padding_idx=0)"
    value = got[4].ok(label)
    assert isinstance(value, Tensor) and value.sparse, f"{label} must return a sparse COO tensor"
    assert value.data.dtype == torch.float64, (
        f"{label} is {value.data.dtype}: the gradient keeps grad_out's dtype (no .float() on the values)"
    )
    assert torch.equal(value.data._values(), torch.tensor([[6.0, 8.0], [3.0, 4.0]], dtype=torch.float64)), (
        f"{label}: rows 1 and 3 must hold [6, 8] and [3, 4], as with int64 ids (int32 ids are integers too)"
    )
    label = "sparse_embedding_grad(ids [[2, 2]], grad_out [[[1, -2], [-1, 2]]], 5)"
    value = got[5].ok(label)
    assert isinstance(value, Tensor) and value.sparse, f"{label} must return a sparse COO tensor"
    assert value.data.sparse_dim() == 1 and value.data._indices().tolist() == [[2]], (
        f"{label} stores rows {value.data._indices().tolist()}: row 2 is looked up, so it is stored even though its "
        f"two gradients cancel to zero; build the tensor from the ids, not from the dense gradient's nonzero rows "
        f"(.to_sparse(1))"
    )


ROW_FRACTION = 32000 * 512 * 4 / (8 + 512 * 4)  # dense bytes over one stored row's (an int64 index, 512 floats)


@test("q3", points=1)
def sparse_fraction_for_seeds_1_and_2(sparse_fraction):
    got = yield [run(sparse_fraction, 1), run(sparse_fraction, 2)]
    value = got[0].number("sparse_fraction(1)")
    rows = value * ROW_FRACTION  # stored rows, an integer when only the draw differs
    assert abs(rows - 8 * 256) > 1e-6 * 8 * 256, (
        f"sparse_fraction(1) is {value:.5f}, the bytes of 2048 stored rows, one per looked-up position: count the "
        f"coalesced gradient, where the positions that share an id share one row (seed 1's ids touch 1991 rows)"
    )
    redrawn = abs(rows - round(rows)) < 1e-6 * max(rows, 1.0) and 1000 <= round(rows) <= 3000 and round(rows) != 1991
    assert not redrawn, (
        f"sparse_fraction(1) is {value:.5f}, {round(rows)} stored rows where seed 1's ids touch 1991 (0.0625): the "
        f"bytes are counted right but other ids were drawn; draw the ids right after torch.manual_seed(seed), before "
        f"any other random call (no table needs to be built)"
    )
    assert abs(value - 0.062462) <= 0.000051, (
        f"sparse_fraction(1) is {value:.5f}, expected 0.0625 to 4 decimals: 8 bytes per stored index plus 4 per "
        f"stored value, over 32000 * 512 * 4 bytes; it uses your sparse_embedding_grad, so check question 2 first "
        f"(grading tries other seeds)"
    )
    value = got[1].number("sparse_fraction(2)")
    assert abs(value - 0.062619) <= 0.000051, (
        f"sparse_fraction(2) is {value:.5f}, expected 0.0626 to 4 decimals, though seed 1 gave the right value: "
        f"other ids were drawn; draw the ids right after torch.manual_seed(seed), before any other random call (no "
        f"table needs to be built)"
    )


def _same(seconds, expected):
    """Whether ``seconds`` is ``expected`` up to round-off (relative 1e-9)."""
    return abs(seconds / expected - 1) < 1e-9


def _bound(out, label):
    """``(seconds, roof)`` from a ``time_bound`` outcome, with the types the question asks for."""
    value = out.ok(label)
    assert isinstance(value, (tuple, list)) and len(value) == 2, f"{label} must return a tuple (seconds, roof)"
    seconds, roof = value
    assert isinstance(seconds, float), f"{label}: seconds must be a Python float (use float(...) or .item())"
    assert roof in ("memory", "compute"), f"{label}: roof must be the string 'memory' or 'compute', got {roof!r}"
    return seconds, roof


@test("q4", points=0.5)
def min_bytes_of_check_yourself_question_1(min_bytes):
    got = yield run(min_bytes, 8, 512, 768, 4)
    value = got.number("min_bytes(8, 512, 768, 4)", int)
    assert value == 26_738_688, (
        f"min_bytes(8, 512, 768, 4) is {value}, expected 4 * (2 * 8 * 512 * 768 + 512 * 768) = 26,738,688: which "
        f"tensors are read, which written, and how often?"
    )


TWO_STEPS = [(2**20, 50.0), (2**24, 10.0)]  # (bytes read + written, GB/s): a cache, then DRAM


THREE_STEPS = [(2**20, 20.0), (2**22, 60.0), (2**24, 10.0)]  # the fastest step is not the last
AT_A_STEP = [(2**20, 50.0), (4_456_448, 20.0), (2**24, 10.0)]  # a swept size equal to (8, 128, 512, 4)'s working set


@test("q4", points=0.5)
def time_bound_reads_the_working_sets_step(time_bound):
    got = yield [
        run(time_bound, 8, 128, 512, 4, TWO_STEPS, 100.0),
        run(time_bound, 8, 512, 768, 4, THREE_STEPS, 100.0),
        run(time_bound, 8, 128, 512, 4, AT_A_STEP, 100.0),
    ]
    label = f"time_bound(8, 128, 512, 4, {TWO_STEPS}, 100.0)"
    seconds, roof = _bound(got[0], label)
    assert roof == "memory", f"{label}: 0.25 FLOP/byte against a roof of 100 GFLOP/s is memory-bound"
    # 4 * (2 * 8 * 128 * 512 + 128 * 512) = 4,456,448 bytes (4.25 MiB) lie between the 1 MiB and 16 MiB steps
    assert not _same(seconds, (8.912896e-05 + 1.048576e-05)), (
        f"{label} is {seconds!r} s, the memory time plus the compute time (8.912896e-05 + 1.048576e-05 s): the "
        f"bound is the larger of the two roofs, not their sum"
    )
    assert _same(seconds, 8.912896e-05), (
        f"{label} is {seconds!r} s, expected 4,456,448 bytes at 50 GB/s: the working set (4.25 MiB) has reached "
        f"the 1 MiB step but not the 16 MiB one (and 1 GB/s is 1e9 bytes per second)"
    )

    label = f"time_bound(8, 512, 768, 4, {THREE_STEPS}, 100.0)"
    seconds, _ = _bound(got[1], label)
    # 26,738,688 bytes (25.5 MiB) lie past the last swept size: its 10 GB/s, not the sweep's fastest 60 GB/s
    assert not _same(seconds, (26_738_688 / 60e9)), (
        f"{label} is {seconds!r} s, 26,738,688 bytes at the sweep's fastest rate, 60 GB/s: the rate is the one of the "
        f"step the working set (25.5 MiB) has reached, the largest swept size at most it (here the last, 16 MiB), "
        f"not the fastest"
    )
    assert _same(seconds, (26_738_688 / 10e9)), (
        f"{label} is {seconds!r} s, expected 26,738,688 bytes at 10 GB/s = 2.6738688e-03 s: a working set (25.5 "
        f"MiB) larger than every swept size takes the last entry"
    )
    label = f"time_bound(8, 128, 512, 4, {AT_A_STEP}, 100.0)"
    seconds, _ = _bound(got[2], label)
    assert not _same(seconds, (4_456_448 / 50e9)), (
        f"{label} is {seconds!r} s, 4,456,448 bytes at the 1 MiB step's 50 GB/s: a working set exactly equal to a "
        f"swept size (4,456,448 bytes) has reached that step: compare sizes with <=, not <"
    )
    assert _same(seconds, (4_456_448 / 20e9)), (
        f"{label} is {seconds!r} s, expected 4,456,448 bytes at the 4,456,448-byte step's 20 GB/s = 2.228224e-04 s"
    )


@test("q4", points=0.5)
def time_bound_below_the_sweep_and_compute_bound(time_bound):
    got = yield [run(time_bound, 1, 4, 8, 4, TWO_STEPS, 100.0), run(time_bound, 8, 128, 512, 4, TWO_STEPS, 0.001)]
    label = f"time_bound(1, 4, 8, 4, {TWO_STEPS}, 100.0)"
    seconds, roof = _bound(got[0], label)
    # 4 * (2 * 1 * 4 * 8 + 4 * 8) = 384 bytes, below the first swept size
    assert _same(seconds, 7.68e-09), (
        f"{label} is {seconds!r} s, expected 384 bytes at 50 GB/s = 7.68e-09 s: a working set smaller than every "
        f"swept size takes the first entry"
    )
    label = f"time_bound(8, 128, 512, 4, {TWO_STEPS}, 0.001)"
    seconds, roof = _bound(got[1], label)
    assert roof == "compute", f"{label}: at 0.001 GFLOP/s the compute time is the larger: roof 'compute'"
    assert not _same(seconds, 0.524288), (
        f"{label} is {seconds!r} s, b * s * d FLOPs: the layer does 2 * b * s * d (a multiply and an add per output "
        f"element)"
    )
    assert _same(seconds, 1.048576), (
        f"{label} is {seconds!r} s, expected 2 * 8 * 128 * 512 FLOPs at 0.001 GFLOP/s = 1.048576 s, the larger roof"
    )


#: (arguments, expected bytes) of table_step_bytes for a (1000, 16) float32 table and 10 distinct ids: a dense
#: (1000, 16) float32 tensor is 64,000 bytes, a coalesced sparse gradient 10 * (16 * 4 + 8) = 720
STEP_BYTES = [
    (("adam",), {}, 192_000),
    (("sgd",), {"sparse": True}, 720),
    (("sparseadam",), {"sparse": True}, 128_720),
    (("adagrad",), {"sparse": True}, 64_720),
    (("sgd",), {"sparse": True, "tied": True}, 64_000),
    (("adam",), {"itemsize": 2}, 96_000),
]


def _call(args, kwargs):
    options = "".join(f", {k}={v!r}" for k, v in kwargs.items())
    return f"table_step_bytes(1000, 16, 10, {args[0]!r}{options})"


@test("q5", points=1)
def table_step_bytes_counts_the_gradient_and_the_dense_state(table_step_bytes):
    got = yield [run(table_step_bytes, 1000, 16, 10, *args, **kwargs) for args, kwargs, _ in STEP_BYTES]
    found = []
    for (args, kwargs, expected), out in zip(STEP_BYTES, got):
        value = out.ok(_call(args, kwargs))
        assert type(value) is int, f"{_call(args, kwargs)} must return a Python int (bytes), got {value!r}"
        found.append(value)
    adam, sgd, lazy, adagrad, tied, half = found
    assert sgd != 640, (
        f"{_call(*STEP_BYTES[1][:2])} is 640 bytes, the values alone: a coalesced sparse gradient also stores one "
        f"int64 index (8 bytes) per row, 10 * (16 * 4 + 8) = 720"
    )
    assert sgd == 720, (
        f"{_call(*STEP_BYTES[1][:2])} is {sgd}, expected 720: plain SGD keeps no state, and the sparse gradient holds "
        f"the 10 distinct rows, each 16 float32 values plus one int64 index"
    )
    assert tied == 64_000, (
        f"{_call(*STEP_BYTES[4][:2])} is {tied}, expected 64,000: a tied output layer's softmax gradient reaches "
        f"every row, so the table's gradient is a dense (1000, 16) tensor even with sparse=True"
    )
    assert adam != 128_000, (
        f"{_call(*STEP_BYTES[0][:2])} is 128,000 bytes: Adam keeps two moments (exp_avg and exp_avg_sq) besides "
        f"the dense gradient, 3 * 64,000 = 192,000"
    )
    assert adam == 192_000 and half == 96_000, (
        f"{_call(*STEP_BYTES[0][:2])} must be 192,000 (a dense gradient and two moments, 64,000 bytes each) and "
        f"with itemsize=2, 96,000; got {adam} and {half}"
    )
    assert lazy == 128_720 and adagrad == 64_720, (
        f"{_call(*STEP_BYTES[2][:2])} is {lazy} and {_call(*STEP_BYTES[3][:2])} {adagrad}, expected 128,720 and "
        f"64,720: the gradient is sparse (720 bytes) but SparseAdam's two moments and Adagrad's sum of squares are "
        f"dense (1000, 16) tensors, 64,000 bytes each"
    )


@test("q5", points=0.5)
def table_step_bytes_refuses_what_the_optimizers_refuse(table_step_bytes):
    bad = [
        (("adam",), {"sparse": True}, "Adam refuses a sparse gradient"),
        (("sparseadam",), {}, "SparseAdam refuses a dense gradient"),
        (("sparseadam",), {"sparse": True, "tied": True}, "a tied table's gradient is dense"),
        (("momentum",), {}, "an unknown optimizer"),
    ]
    got = yield [
        run(table_step_bytes, 1000, 16, 10, "sgd"),
        run(table_step_bytes, 1000, 16, 10, "adam", sparse=True, tied=True),
    ] + [run(table_step_bytes, 1000, 16, 10, *args, **kwargs) for args, kwargs, _ in bad]
    value = got[0].ok("table_step_bytes(1000, 16, 10, 'sgd')")
    assert value == 64_000, (
        f"table_step_bytes(1000, 16, 10, 'sgd') is {value!r}, expected 64,000: a dense float32 gradient, no state"
    )
    tied_adam = "table_step_bytes(1000, 16, 10, 'adam', sparse=True, tied=True)"
    assert not got[1].raised, (
        f"{tied_adam} raised {got[1].raised}, expected 192,000: a tied table's gradient is dense even with "
        f"sparse=True, so Adam accepts it (only an untied table's sparse gradient is refused)"
    )
    value = got[1].number(tied_adam, int)
    assert value == 192_000, (
        f"{tied_adam} is {value!r}, expected 192,000: a tied table's gradient is dense, so this is dense Adam, a "
        f"dense gradient and two moments of 64,000 bytes each"
    )
    for (args, kwargs, why), out in zip(bad, got[2:]):
        out.raises(f"{_call(args, kwargs)} ({why})", ValueError)


#: (weight, update, kept?, why) for kept_updates, by format: each entry a weight stored in that format and a float32
#: update; "why" is what a wrong answer that gets this entry wrong has missed
KEPT_BF16 = [
    (1.0, 0.003, False, "bfloat16 keeps 8 significant bits, so its spacing in [1, 2) is 2^-7 = 0.0078, and an update "
     "below half of it (0.0039) rounds back to the weight"),
    (1.5, 0.0045, True, "the spacing is set by the weight's exponent, 2^-7 for every weight in [1, 2), not by |w| "
     "itself: 0.0045 is more than half of it (0.0039)"),
    (1.0, -0.0025, True, "below a power of two the spacing halves: the neighbour under 1.0 is 1 - 2^-8, so a "
     "downward update of more than 2^-9 = 0.00195 is kept"),
    (1.0, 2**-8, False, "an update of exactly half a spacing is a tie, which rounds to the neighbour whose last bit "
     "is even: 1.0 itself"),
    (1 + 2**-7, 2**-8, True, "an update of exactly half a spacing is a tie, which rounds to the neighbour whose last "
     "bit is even: from 1 + 2^-7 (odd) that is 1 + 2^-6"),
    (1.0, 2**-8 + 2**-16, True, "the update is a float32 number added in float32: rounded to bfloat16 first, it "
     "becomes exactly half a spacing (a tie) and is lost"),
    (0.05, 1e-4, False, "in [2^-5, 2^-4) bfloat16's spacing is 2^-12 = 2.4e-4 (chapter 7b, check yourself 1)"),
    (-0.05, -1e-3, True, "1e-3 is about four of bfloat16's spacings at 0.05"),
    (0.0, 1e-30, True, "bfloat16 has float32's range of exponents: 1e-30 is far above its smallest step from zero"),
]
KEPT_FP16 = [
    (1.0, 0.0004, False, "float16 keeps 11 significant bits: its spacing in [1, 2) is 2^-10 = 0.00098, and 0.0004 "
     "is below half of it"),
    (1.0, 0.0006, True, "float16 keeps 11 significant bits: its spacing in [1, 2) is 2^-10 = 0.00098, and 0.0006 is "
     "more than half of it (round to the weight's own format, not bfloat16's)"),
    (0.05, 1e-4, True, "float16's spacing at 0.05 is 2^-15 = 3.1e-5, eight times finer than bfloat16's"),
    (2**-20, 2**-26, False, "below 2^-14 float16 is subnormal: its spacing stays 2^-24 however small the weight, "
     "and 2^-26 is below half of it"),
    (2**-20, 3 * 2**-26, True, "below 2^-14 float16 is subnormal, with spacing 2^-24: 3 * 2^-26 is more than half "
     "of it"),
    (0.0, 1e-8, False, "float16's smallest step from zero is 2^-24 = 6e-8, and 1e-8 is below half of it"),
    (0.0, 1e-7, True, "1e-7 is more than half of float16's smallest step from zero, 2^-24 = 6e-8"),
    (1 + 2**-10, 2**-11, True, "a tie from an odd last bit rounds to the even neighbour, 1 + 2^-9"),
    (0.0, -(2**-26), False, "compare values, not bit patterns: +0 plus -2^-26 rounds to -0.0 in float16, which "
     "equals +0.0, so the stored weight does not change"),
]


def _kept(kept_updates, weight, update):
    """The answer's mask, and both inputs after the call (to see that it left them unchanged)."""
    mask = kept_updates(weight, update)
    return {"mask": mask, "weight": weight, "update": update}


def _entries(entries, dtype):
    weight = torch.tensor([w for w, _, _, _ in entries], dtype=dtype)
    return weight, torch.tensor([u for _, u, _, _ in entries], dtype=torch.float32)


@test("q6", points=0.25)
def kept_updates_on_chosen_weights(kept_updates):
    cases = [(KEPT_BF16, torch.bfloat16), (KEPT_FP16, torch.float16)]
    inputs = [_entries(entries, dtype) for entries, dtype in cases]
    got = yield [run(_kept, kept_updates, weight.clone(), update.clone()) for weight, update in inputs]
    for (entries, dtype), (weight, update), out in zip(cases, inputs, got):
        label = f"kept_updates({len(entries)} {dtype} weights, float32 updates)"
        r = out.ok(label)
        mask = as_tensor(r["mask"], label)
        assert mask.dtype == torch.bool and mask.shape == weight.shape, (
            f"{label} must return a torch.bool tensor of the weight's shape {tuple(weight.shape)}, got "
            f"{mask.dtype} of shape {tuple(mask.shape)}"
        )
        assert torch.equal(as_tensor(r["weight"], "weight"), weight) and torch.equal(
            as_tensor(r["update"], "update"), update
        ), f"{label} changed its weight or update: compute the stored sum in a new tensor, leave both unchanged"
        expected = [kept for _, _, kept, _ in entries]
        found = mask.tolist()
        assert found != [not kept for kept in expected], (
            f"{label}: every entry is the opposite of what it should be: return True where the update is kept (the "
            f"stored weight changes), False where it is lost"
        )
        for (w, u, kept, why), value in zip(entries, found):
            assert value == kept, (
                f"{label}: the update {u:.6g} of a {dtype} weight {w:.6g} is {'kept' if value else 'lost'} in your "
                f"answer, but {'kept' if kept else 'lost'} when the float32 sum is rounded to {dtype}: {why}"
            )


@test("q6", points=0.25)
def kept_updates_refuses_other_formats_and_shapes(kept_updates):
    weight = torch.tensor([[1.0, 0.5, -2.0]], dtype=torch.bfloat16)
    update = torch.tensor([[0.01, 1e-4, -0.01]])
    got = yield [
        run(kept_updates, weight, update),
        run(kept_updates, weight.float(), update),
        run(kept_updates, weight, update.T),
    ]
    found = got[0].tensor("kept_updates(bfloat16 weights [[1, 0.5, -2]], updates [[0.01, 1e-4, -0.01]])", (1, 3))
    assert found.tolist() == [[True, False, True]], (
        f"kept_updates(bfloat16 weights [[1, 0.5, -2]], updates [[0.01, 1e-4, -0.01]]) is {found.tolist()}, expected "
        f"[[True, False, True]] (this test credits the errors to an answer that computes the mask)"
    )
    message = got[1].raises("kept_updates(float32 weights, ...) (not stored in a 16-bit format)", TypeError)
    assert "float32" in message and "weight" in message and ("bfloat16" in message or "float16" in message), (
        f"the TypeError of kept_updates(float32 weights, ...) must name the argument weight, its dtype (float32) and "
        f"the formats it accepts (bfloat16, float16): got {message!r}"
    )
    message = got[2].raises("kept_updates(weights (1, 3), updates (3, 1)) (shapes that differ)", ValueError)
    assert "1, 3" in message and "3, 1" in message, (
        f"the ValueError of kept_updates(weights (1, 3), updates (3, 1)) must name both shapes, (1, 3) and (3, 1): "
        f"got {message!r}"
    )
