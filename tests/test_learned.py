import pytest
import torch

from course_embed import LearnedPositionalEmbedding


def test_adds_rows_at_offset(device, gen):
    pe = LearnedPositionalEmbedding(10, 6).to(device)
    x = torch.randn(3, 4, 6, generator=gen).to(device)
    torch.testing.assert_close(pe(x, offset=5), x + pe.weight[5:9], rtol=0, atol=0)


def test_gradient_reaches_only_used_rows(gen):
    pe = LearnedPositionalEmbedding(10, 6)
    pe(torch.randn(2, 3, 6, generator=gen), offset=2).sum().backward()
    used = pe.weight.grad.abs().sum(dim=1) > 0
    assert used.tolist() == [False, False, True, True, True] + [False] * 5


def test_sequence_past_max_len_is_a_clear_error():
    pe = LearnedPositionalEmbedding(8, 4)
    with pytest.raises(ValueError, match=r"length 6 at offset 5.*max_len=8.*resize"):
        pe(torch.zeros(1, 6, 4), offset=5)


def test_sequence_first_input_is_detected():
    pe = LearnedPositionalEmbedding(16, 4)
    with pytest.raises(ValueError, match=r"batch first.*transpose\(0, 1\)"):
        pe(torch.zeros(3, 40, 4))  # 40 positions do not fit, 3 would: a (seq, batch, d) tensor


def test_resize_interpolates_linearly_and_keeps_endpoints(gen):
    pe = LearnedPositionalEmbedding(5, 3)
    old = pe.weight.detach().clone()
    pe.resize(9)
    new = pe.weight.detach()
    assert pe.max_len == 9 and new.shape == (9, 3)
    torch.testing.assert_close(new[::2], old)  # every other new row sits on an old one
    torch.testing.assert_close(new[1::2], (old[:-1] + old[1:]) / 2)  # the rest are midpoints
    assert isinstance(pe.weight, torch.nn.Parameter) and pe.weight.requires_grad
    pe(torch.zeros(1, 9, 3))  # the longer sequence now fits


def test_resize_rejects_tiny_tables():
    with pytest.raises(ValueError, match="at least 2 rows"):
        LearnedPositionalEmbedding(4, 3).resize(1)


def test_bad_construction():
    with pytest.raises(ValueError, match="max_len must be a positive integer"):
        LearnedPositionalEmbedding(0, 3)


def test_no_sequence_first_hint_when_swapping_would_not_help():
    with pytest.raises(ValueError) as info:
        LearnedPositionalEmbedding(16, 4)(torch.zeros(20, 40, 4))
    assert "transpose" not in str(info.value)
