"""T5 buckets against an independent plain-Python version of the T5 rule; the learned per-head bias."""

import math

import pytest
import torch

from course_embed.relative import RelativePositionBias, relative_position_bucket


def t5_bucket(offset: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """The T5 rule for one ``key - query`` offset, in plain Python."""
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        if offset > 0:
            bucket = num_buckets
        distance = abs(offset)
    else:
        distance = max(-offset, 0)
    exact = num_buckets // 2
    if distance < exact:
        return bucket + distance
    large = exact + int(math.log(distance / exact) / math.log(max_distance / exact) * (num_buckets - exact))
    return bucket + min(large, num_buckets - 1)


CONFIGS = [(32, 128), (16, 64), (64, 256), (8, 20), (32, 1000)]


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", CONFIGS)
def test_buckets_follow_the_t5_rule(device, bidirectional, num_buckets, max_distance):
    offsets = torch.arange(-1500, 1501, device=device)
    got = relative_position_bucket(
        offsets, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert got.dtype == torch.long and got.device.type == device.type
    expected = [t5_bucket(o, bidirectional, num_buckets, max_distance) for o in offsets.tolist()]
    assert got.tolist() == expected


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", CONFIGS)
def test_buckets_are_exact_then_monotone_then_capped(bidirectional, num_buckets, max_distance):
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    exact = per_direction // 2
    distance = torch.arange(0, 3 * max_distance)
    past = relative_position_bucket(
        -distance, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert past[:exact].tolist() == list(range(exact))  # small distances: one bucket each
    assert bool((past.diff() >= 0).all())  # never decreases with distance
    assert bool((past[max_distance:] == per_direction - 1).all())  # far keys share the last bucket
    assert past.max().item() == per_direction - 1 and len(past.unique()) == per_direction  # every bucket used
    future = relative_position_bucket(
        distance, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    if bidirectional:
        assert future[1:].tolist() == (past[1:] + per_direction).tolist()  # mirrored into the upper half
    else:
        assert bool((future == 0).all())  # causal: a later key counts as distance 0


def test_module_bias_reads_the_table_by_bucket(device, gen):
    rpb = RelativePositionBias(3, num_buckets=8, max_distance=20, bidirectional=False).to(device)
    bias = rpb(10, 10)
    assert bias.shape == (3, 10, 10)
    for i in range(10):
        for j in range(10):
            b = t5_bucket(j - i, False, 8, 20)
            torch.testing.assert_close(bias[:, i, j], rpb.weight[b], rtol=0, atol=0)
    torch.testing.assert_close(bias[:, 1:, 1:], bias[:, :-1, :-1], rtol=0, atol=0)  # depends on j - i only


def test_module_with_a_kv_cache_and_gradient():
    rpb = RelativePositionBias(4, bidirectional=False)
    torch.testing.assert_close(rpb(1, 300), rpb(300, 300)[:, -1:], rtol=0, atol=0)
    torch.testing.assert_close(rpb(5, 300), rpb(300, 300)[:, -5:], rtol=0, atol=0)
    rpb(6, 6).sum().backward()
    used = rpb.weight.grad.abs().sum(dim=1) > 0
    assert used.tolist() == [True] * 6 + [False] * 26  # distances 0..5 use buckets 0..5


def test_bad_inputs():
    with pytest.raises(TypeError, match="integer tensor"):
        relative_position_bucket(torch.zeros(3))
    with pytest.raises(ValueError, match=r"num_buckets must be an integer >= 4 \(bidirectional=True\)"):
        relative_position_bucket(torch.zeros(3, dtype=torch.long), num_buckets=3)
    with pytest.raises(ValueError, match="max_distance must exceed the 8"):
        relative_position_bucket(torch.zeros(3, dtype=torch.long), num_buckets=32, max_distance=8)
    with pytest.raises(ValueError, match="num_heads must be a positive integer"):
        RelativePositionBias(0)
    with pytest.raises(ValueError, match="query_len <= key_len"):
        RelativePositionBias(2)(5, 4)
