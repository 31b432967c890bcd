"""Vocabulary-parallel embedding (exact equality with the unsharded table) and cross-entropy (equal to round-off), in
2 real processes on gloo."""

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from course_embed import parallel
from course_embed.parallel import VocabParallelEmbedding, memory_per_rank, shard_range


@pytest.mark.parametrize("vocab_size, world_size", [(10, 1), (10, 3), (50257, 8), (7, 7)])
def test_shards_are_contiguous_balanced_and_cover_the_vocabulary(vocab_size, world_size):
    ranges = [shard_range(vocab_size, k, world_size) for k in range(world_size)]
    assert ranges[0][0] == 0 and ranges[-1][1] == vocab_size
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    sizes = [end - start for start, end in ranges]
    assert max(sizes) - min(sizes) <= 1 and sorted(sizes, reverse=True) == sizes


@pytest.mark.parametrize(
    "args, match",
    [
        ((10, 2, 2), r"rank must be in \[0, world_size\)"),
        ((10, -1, 2), "rank must be"),
        ((3, 0, 4), "vocab_size=3 is smaller than world_size=4"),
    ],
)
def test_bad_shard_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        shard_range(*args)


def test_memory_per_rank_formula():
    one = memory_per_rank(50_000, 1024, 1)
    assert one["weight"] == 50_000 * 1024 * 4 and one["optimizer"] == 2 * one["weight"]
    assert one["total"] == 4 * one["weight"]
    eight = memory_per_rank(50_000, 1024, 8, itemsize=2, optimizer="sgd")
    assert eight["weight"] == 6250 * 1024 * 2 and eight["optimizer"] == 0 and eight["total"] == 2 * eight["weight"]
    assert memory_per_rank(10, 4, 3)["weight"] == 4 * 4 * 4  # the largest shard: 4 of 10 rows
    with pytest.raises(ValueError, match="optimizer must be one of"):
        memory_per_rank(10, 4, 2, optimizer="lion")


def test_needs_an_initialised_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is already running in this process")
    with pytest.raises(RuntimeError, match="init_process_group"):
        VocabParallelEmbedding(10, 4)


@pytest.fixture
def single_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is already running in this process")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{parallel.free_port()}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_world_of_one_is_the_plain_lookup(single_process_group, gen):
    full = torch.randn(30, 8, generator=gen)
    full[4] = 0
    emb = VocabParallelEmbedding(30, 8, padding_idx=4).load_full_(full)
    assert (emb.start, emb.end) == (0, 30) and "rows=[0, 30) on rank 0 of 1" in repr(emb)
    ids = torch.randint(0, 30, (3, 5), generator=gen)
    ids[0, 0] = 4
    weight = full.clone().requires_grad_()
    assert torch.equal(emb(ids), F.embedding(ids, weight, 4))
    emb(ids).square().sum().backward()
    F.embedding(ids, weight, 4).square().sum().backward()
    assert torch.equal(emb.weight.grad, weight.grad) and torch.count_nonzero(emb.weight.grad[4]) == 0
    with pytest.raises(ValueError, match=r"shape \(vocab_size, d_model\) = \(30, 8\)"):
        emb.load_full_(torch.zeros(29, 8))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        emb(torch.tensor([[30]]))
    with pytest.raises(ValueError, match="padding_idx=30"):
        VocabParallelEmbedding(30, 8, padding_idx=30)


def test_two_processes_equal_the_unsharded_embedding_exactly_and_the_cross_entropy_to_round_off():
    # 1001 rows: shards of 501 and 500; the pad id lives in the second shard, at a non-zero local index
    report = parallel.compare_with_unsharded(
        world_size=2, batch=4, seq=32, vocab_size=1001, d_model=16, padding_idx=900, seed=3
    )
    assert report["rows_per_rank"] == [501, 500]
    assert report["output_equal"] and report["max_output_diff"] == 0.0
    assert report["grad_equal"] and report["max_grad_diff"] == 0.0
    # vocabulary-parallel cross-entropy: the maximum and the target logit reduce exactly, the sum of exponentials
    # is a sum of two partial sums, so loss and gradients agree to float64 round-off (float32: its round-off)
    ce64, ce32 = report["ce_float64"], report["ce_float32"]
    assert ce64["loss"] > 0
    assert ce64["loss_diff"] <= 8 * torch.finfo(torch.float64).eps * ce64["loss"]
    assert ce64["hidden_grad_diff"] < 1e-15 and ce64["head_grad_diff"] < 1e-15
    assert ce32["loss_diff"] <= 8 * torch.finfo(torch.float32).eps * ce32["loss"]
    assert ce32["hidden_grad_diff"] < 1e-7 and ce32["head_grad_diff"] < 1e-7


def test_vocab_parallel_cross_entropy_in_a_world_of_one(single_process_group, gen):
    logits = torch.randn(6, 4, 30, generator=gen, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 30, (6, 4), generator=gen)
    reference = logits.detach().clone().requires_grad_()
    for reduction in ("mean", "sum", "none"):
        logits.grad = reference.grad = None
        loss = parallel.vocab_parallel_cross_entropy(logits, targets, 30, reduction=reduction)
        expected = F.cross_entropy(reference.flatten(0, 1), targets.flatten(), reduction=reduction)
        torch.testing.assert_close(loss, expected.view(loss.shape), rtol=1e-13, atol=1e-13)
        upstream = torch.randn(loss.shape, generator=gen, dtype=torch.float64)
        (loss * upstream).sum().backward()
        (expected.view(loss.shape) * upstream).sum().backward()
        torch.testing.assert_close(logits.grad, reference.grad, rtol=1e-13, atol=1e-13)
    hidden = torch.randn(5, 3, generator=gen, requires_grad=True)
    copied = parallel.copy_to_ranks(hidden)
    copied.sum().backward()  # world of one: the all-reduce of the gradient is the identity
    assert torch.equal(copied, hidden) and torch.equal(hidden.grad, torch.ones(5, 3))
    with pytest.raises(ValueError, match="holds the 30 vocabulary rows"):
        parallel.vocab_parallel_cross_entropy(torch.zeros(2, 29), torch.zeros(2, dtype=torch.long), 30)
    with pytest.raises(ValueError, match="reduction must be"):
        parallel.vocab_parallel_cross_entropy(torch.zeros(2, 30), torch.zeros(2, dtype=torch.long), 30, reduction="avg")
    with pytest.raises(ValueError, match="targets contains the id 30"):
        parallel.vocab_parallel_cross_entropy(torch.zeros(2, 30), torch.tensor([0, 30]), 30)
