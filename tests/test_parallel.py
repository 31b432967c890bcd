"""Vocabulary-parallel embedding: exact equality with the unsharded table, in 2 real processes on gloo."""

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
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    sizes = [end - start for start, end in ranges]
    assert max(sizes) - min(sizes) <= 1 and sorted(sizes, reverse=True) == sizes


@pytest.mark.parametrize("args, match", [
    ((10, 2, 2), r"rank must be in \[0, world_size\)"),
    ((10, -1, 2), "rank must be"),
    ((3, 0, 4), "vocab_size=3 is smaller than world_size=4"),
])
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


def test_two_processes_equal_the_unsharded_embedding_exactly():
    # 1001 rows: shards of 501 and 500; the pad id lives in the second shard, at a non-zero local index
    report = parallel.compare_with_unsharded(world_size=2, batch=4, seq=32, vocab_size=1001, d_model=16,
                                             padding_idx=900, seed=3)
    assert report["rows_per_rank"] == [501, 500]
    assert report["output_equal"] and report["max_output_diff"] == 0.0
    assert report["grad_equal"] and report["max_grad_diff"] == 0.0
