import math

import pytest
import torch
from torch import nn

from course_embed import TransformerEmbedding, sinusoidal_table


def test_add_sinusoidal_equals_textbook_sum(device, gen):
    m = TransformerEmbedding(100, 32, dropout=0.0, padding_idx=0).to(device)
    ids = torch.randint(0, 100, (3, 9), generator=gen).to(device)
    expected = m.token.weight[ids] * math.sqrt(32) + sinusoidal_table(9, 32, offset=2, device=device)
    torch.testing.assert_close(m(ids, offset=2), expected)


def test_concat_keeps_width_and_places_positions_last(gen):
    m = TransformerEmbedding(100, 32, fusion="concat", d_position=8, dropout=0.0)
    ids = torch.randint(0, 100, (2, 5), generator=gen)
    out = m(ids)
    assert out.shape == (2, 5, 32)
    torch.testing.assert_close(out[..., :24], m.token(ids))
    torch.testing.assert_close(out[..., 24:], sinusoidal_table(5, 8).expand(2, -1, -1))
    assert m.token.weight.shape == (100, 24)


def test_learned_positions_and_layer_norm(gen):
    m = TransformerEmbedding(50, 16, position="learned", max_len=12, layer_norm=True, dropout=0.0, scale=False)
    ids = torch.randint(0, 50, (2, 7), generator=gen)
    pre = m.token.weight[ids] + m.positions.weight[:7]
    torch.testing.assert_close(m(ids), nn.functional.layer_norm(pre, (16,), m.norm.weight, m.norm.bias))


def test_no_position_is_the_token_embedding(gen):
    m = TransformerEmbedding(50, 16, position=None, dropout=0.0)
    ids = torch.randint(0, 50, (2, 7), generator=gen)
    torch.testing.assert_close(m(ids), m.token(ids), rtol=0, atol=0)


def test_dropout_only_in_training_and_preserves_expectation():
    torch.manual_seed(0)
    m = TransformerEmbedding(10, 64, dropout=0.25)
    ids = torch.randint(0, 10, (64, 64))
    m.eval()
    clean = m(ids)
    assert torch.equal(m(ids), clean)
    m.train()
    noisy = m(ids)
    zeros = (noisy == 0).float().mean().item()
    assert abs(zeros - 0.25) < 0.01
    kept = noisy != 0
    torch.testing.assert_close(noisy[kept], clean[kept] / 0.75)


def test_pad_row_stays_zero_in_the_full_layer(gen):
    m = TransformerEmbedding(30, 8, padding_idx=0, dropout=0.0)
    ids = torch.randint(0, 30, (3, 6), generator=gen)
    ids[:, -2:] = 0
    m(ids).sum().backward()
    assert torch.count_nonzero(m.token.weight.grad[0]) == 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(position="rope"), "inside attention"),
        (dict(fusion="mul"), "fusion must be one of"),
        (dict(position=None, fusion="concat"), "needs a position scheme"),
        (dict(dropout=1.0), "dropout must be a probability"),
        (dict(fusion="concat", d_position=32), r"d_position must be in \(0, d_model=32\)"),
        (dict(padding_idx=99), "padding_idx=99"),
        (dict(d_model=31), "even"),
    ],
)
def test_bad_configuration(kwargs, match):
    args = dict(vocab_size=20, d_model=32) | kwargs
    with pytest.raises(ValueError, match=match):
        TransformerEmbedding(**args)


def test_bad_ids_shape_and_values():
    m = TransformerEmbedding(20, 8)
    with pytest.raises(ValueError, match=r"\(batch, seq\).*unsqueeze\(0\)"):
        m(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="vocabulary"):
        m(torch.tensor([[1, 20]]))
    with pytest.raises(TypeError, match="integer"):
        m(torch.tensor([[1.0, 2.0]]))


def test_sequence_first_ids_with_learned_table():
    m = TransformerEmbedding(20, 8, position="learned", max_len=16)
    with pytest.raises(ValueError, match=r"ids.transpose\(0, 1\)"):
        m(torch.zeros(4, 100, dtype=torch.long))


def test_meta_device_shapes():
    m = TransformerEmbedding(50_000, 512, fusion="concat", device="meta")
    out = m(torch.empty(2, 1024, dtype=torch.long, device="meta"))
    assert out.shape == (2, 1024, 512) and out.device.type == "meta"
