"""The embedding backward's summation order: the sort-based segment sum is PyTorch's gradient and gives the same bits
whatever the arrival order; adding in arrival order (what atomic adds do) does not."""

import pytest
import torch
import torch.nn.functional as F

from course_embed.lab import summation_order as so


@pytest.fixture
def batch(gen):
    ids = so.zipf_ids(1024, 300, generator=gen)  # frequent ids hit their rows dozens of times
    return ids, torch.randn(1024, 16, generator=gen)


def autograd_gradient(ids, grad, vocab_size, padding_idx=None, dtype=torch.float32):
    weight = torch.zeros(vocab_size, grad.shape[1], dtype=dtype, requires_grad=True)
    (F.embedding(ids, weight, padding_idx) * grad.to(dtype)).sum().backward()
    return weight.grad


def test_sorted_gradient_is_pytorchs_gradient(batch):
    ids, grad = batch
    got = so.sorted_gradient(ids, grad, 300)
    torch.testing.assert_close(got, autograd_gradient(ids, grad, 300), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.double(), autograd_gradient(ids, grad, 300, dtype=torch.float64), rtol=0, atol=1e-5)
    # the CPU kernel adds each row's tokens in batch order, and so does the segment sum: equal bit for bit
    assert torch.equal(got, torch.ops.aten.embedding_backward(grad, ids, 300, -1, False, False))
    assert torch.equal(so.scatter_add_gradient(ids, grad, 300), got)  # token order is the same order


def test_sorted_gradient_has_the_same_bits_in_every_arrival_order(batch, gen):
    ids, grad = batch
    first = so.sorted_gradient(ids, grad, 300)
    for _ in range(5):
        assert torch.equal(so.sorted_gradient(ids, grad, 300, torch.randperm(1024, generator=gen)), first)


def test_arrival_order_changes_the_bits_of_repeated_rows_only(batch, gen):
    ids, grad = batch
    base = so.scatter_add_gradient(ids, grad, 300)
    other = so.scatter_add_gradient(ids, grad, 300, torch.randperm(1024, generator=gen))
    differ = (base != other).any(dim=1)  # (v,) rows whose bits changed
    hits = torch.bincount(ids, minlength=300)
    assert differ.any()  # the demonstration is not vacuous
    assert not differ[hits <= 2].any()  # one addition to zero, or two (a + b == b + a), round the same
    torch.testing.assert_close(other, base, rtol=1e-5, atol=1e-5)  # the same sum, to float32 round-off


def test_order_study_groups(batch):
    ids, grad = batch
    table = so.order_study(ids, grad, 300, runs=4)
    assert sum(row["rows"] for row in table) == ids.unique().numel()
    by_hits = {row["hits"]: row for row in table}
    assert by_hits["1"]["scatter_error"] == 0.0 and by_hits["2"]["scatter_rows_differ"] == 0
    assert by_hits["10-99"]["scatter_rows_differ"] > 0 and by_hits["10-99"]["scatter_spread"] > 0
    for row in table:
        assert row["sorted_rows_differ"] == 0 and row["sorted_spread"] == 0.0
        # deterministic is not more accurate: both err by float32 round-off, far below 1e-5 of the row
        assert row["sorted_error"] < 1e-5 and row["scatter_error"] < 1e-5


def test_padding_idx_rows_get_no_gradient(gen):
    ids = torch.randint(0, 20, (200,), generator=gen)
    ids[::7] = 3
    grad = torch.randn(200, 4, generator=gen)
    expected = autograd_gradient(ids, grad, 20, padding_idx=3)
    for order in (None, torch.randperm(200, generator=gen)):
        for fn in (so.sorted_gradient, so.scatter_add_gradient):
            got = fn(ids, grad, 20, order, padding_idx=3)
            assert torch.count_nonzero(got[3]) == 0
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(so.sorted_gradient(ids, grad, 20, padding_idx=-17), expected)  # -17 % 20 == 3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"ids": torch.tensor([[0, 1]])}, r"ids must be \(n,\) and grad \(n, d\)"),
        ({"ids": torch.tensor([0, 10])}, r"ids must lie in \[0, vocab_size=10\)"),
        ({"padding_idx": 10}, r"padding_idx=10 is outside \[-10, 10\)"),
        ({"order": torch.tensor([0, 0])}, "order must be a permutation of range"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = {"ids": torch.tensor([0, 1]), "grad": torch.zeros(2, 3), "vocab_size": 10} | kwargs
    for fn in (so.sorted_gradient, so.scatter_add_gradient):
        with pytest.raises(ValueError, match=match):
            fn(**args)


def test_zipf_ids_are_zipf_like(gen):
    ids = so.zipf_ids(20_000, 100, generator=gen)
    counts = torch.bincount(ids, minlength=100).double()
    assert 1.6 < counts[0] / counts[1] < 2.4 and 7 < counts[0] / counts[9] < 13  # 1/rank: 2 and 10
