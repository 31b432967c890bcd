import pytest
import torch

from course_embed.lab import corpus
from course_embed.lab.heads import head_roles, periods


def one_hot_attention(ids: torch.Tensor, key_of) -> torch.Tensor:
    """Weights (b, 1, s, s) that put all of query t's weight on key_of(t, p) (clamped to the causal range)."""
    b, s = ids.shape
    p = periods(ids)
    weights = torch.zeros(b, 1, s, s, dtype=torch.float64)
    for n in range(b):
        for t in range(s):
            weights[n, 0, t, max(0, min(t, key_of(t, int(p[n]))))] = 1.0
    return weights


def test_periods_finds_each_rows_block_length():
    gen = torch.Generator().manual_seed(0)
    ids, _ = corpus.repeat_batch(6, 40, gen, (3, 12))
    p = periods(ids)
    for n in range(6):
        k = int(p[n])
        assert torch.equal(ids[n, k:], ids[n, : 40 - k]) and len(set(ids[n, :k].tolist())) == k


def test_periods_rejects_text_without_a_repeat():
    with pytest.raises(ValueError, match="copy-task rows"):
        periods(torch.arange(10)[None])


def test_head_roles_scores_the_two_mechanisms_apart():
    gen = torch.Generator().manual_seed(1)
    ids, _ = corpus.repeat_batch(4, 32, gen, (4, 8))
    induction = one_hot_attention(ids, lambda t, p: t - p + 1)
    previous = one_hot_attention(ids, lambda t, p: t - 1)
    weights = torch.cat((induction, previous), dim=1)  # head 0 induction, head 1 previous token
    on_target, on_previous = head_roles(weights, ids)
    torch.testing.assert_close(on_target, torch.tensor([1.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(on_previous, torch.tensor([0.0, 1.0], dtype=torch.float64))


def test_head_roles_counts_every_earlier_repeat_of_the_target():
    gen = torch.Generator().manual_seed(2)
    ids, _ = corpus.repeat_batch(3, 24, gen, (5, 7))
    b, s = ids.shape
    weights = torch.rand(b, 2, s, s, generator=gen, dtype=torch.float64).tril()
    weights = weights / weights.sum(-1, keepdim=True)
    on_target, on_previous = head_roles(weights, ids)
    p = periods(ids)
    target, previous, count = torch.zeros(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64), 0
    for n in range(b):  # the definition, one query at a time
        for t in range(int(p[n]), s - 1):
            keys = [j for j in range(t + 1) if ids[n, j] == ids[n, t + 1]]
            target += weights[n, :, t, keys].sum(-1)
            previous += weights[n, :, t, t - 1]
            count += 1
    torch.testing.assert_close(on_target, target / count)
    torch.testing.assert_close(on_previous, previous / count)
