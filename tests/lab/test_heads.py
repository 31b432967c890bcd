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


def test_head_roles_of_uniform_attention_is_the_mean_of_one_over_keys():
    gen = torch.Generator().manual_seed(2)
    ids, _ = corpus.repeat_batch(3, 24, gen, (5, 5))
    s = 24
    weights = torch.tril(torch.ones(s, s, dtype=torch.float64))
    weights = (weights / weights.sum(-1, keepdim=True)).expand(3, 2, s, s)
    on_target, on_previous = head_roles(weights, ids)
    expected = torch.tensor([1 / (t + 1) for t in range(5, s)], dtype=torch.float64).mean()
    torch.testing.assert_close(on_target, expected.expand(2))
    torch.testing.assert_close(on_previous, expected.expand(2))
