import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_embed import TokenEmbedding, init_table_, tie_weights
from course_embed.lab.token_embedding import init_std


def test_lookup_equals_one_hot_product_and_scale(device, gen):
    emb = TokenEmbedding(50, 12, scale=True).to(device)
    ids = torch.randint(0, 50, (3, 7), generator=gen).to(device)
    one_hot = F.one_hot(ids, 50).double()
    expected = (one_hot @ emb.weight.double()) * math.sqrt(12)
    torch.testing.assert_close(emb(ids).double(), expected, rtol=1e-6, atol=1e-6)


def test_unscaled_is_bare_lookup_any_leading_shape(gen):
    emb = TokenEmbedding(20, 6, scale=False)
    ids = torch.randint(0, 20, (2, 3, 4), generator=gen)
    assert emb(ids).shape == (2, 3, 4, 6)
    torch.testing.assert_close(emb(ids), emb.weight[ids], rtol=0, atol=0)


def test_int32_ids_accepted(gen):
    emb = TokenEmbedding(20, 6)
    ids = torch.randint(0, 20, (2, 5), generator=gen)
    torch.testing.assert_close(emb(ids.int()), emb(ids), rtol=0, atol=0)


@pytest.mark.parametrize("scale, init", [(True, "scaled_normal"), (False, "normal")])
def test_default_init_depends_on_scale(scale, init):
    assert TokenEmbedding(10, 4, scale=scale).init == init


def test_scaled_default_gives_unit_rms_output(gen):
    torch.manual_seed(0)
    emb = TokenEmbedding(5000, 256)
    out = emb(torch.randint(0, 5000, (16, 64), generator=gen))
    rms = out.pow(2).mean().sqrt().item()
    assert abs(rms - 1.0) < 0.02


@pytest.mark.parametrize("init", ["normal", "xavier_uniform", "scaled_normal"])
def test_init_std_matches_closed_form(init):
    torch.manual_seed(0)
    V, d = 4000, 256
    w = TokenEmbedding(V, d, scale=False, init=init).weight.detach().double()
    assert abs(w.std().item() / init_std(init, V, d) - 1) < 0.01
    if init == "xavier_uniform":
        assert w.abs().max().item() <= math.sqrt(6 / (V + d))


def test_nn_embedding_default_is_standard_normal():
    # the fact chapter 1 corrects: not U(+-sqrt(1/d)), not Xavier
    torch.manual_seed(0)
    w = nn.Embedding(4000, 256).weight.detach()
    assert abs(w.std().item() - 1.0) < 0.01
    assert w.abs().max().item() > 3.0


@pytest.mark.parametrize("init", ["normal", "xavier_uniform", "scaled_normal"])
def test_pad_row_and_its_gradient_stay_zero(init, gen):
    emb = TokenEmbedding(30, 8, padding_idx=3, init=init)
    assert torch.count_nonzero(emb.weight[3]) == 0
    emb.reset_parameters("xavier_uniform")
    assert torch.count_nonzero(emb.weight[3]) == 0
    assert torch.count_nonzero(emb.weight[4]) == 8
    ids = torch.randint(0, 30, (4, 9), generator=gen)
    ids[:, -3:] = 3
    emb(ids).pow(2).sum().backward()
    assert torch.count_nonzero(emb.weight.grad[3]) == 0
    assert torch.count_nonzero(emb.weight.grad[ids[0, 0]]) > 0


def test_init_table_rejects_unknown_scheme():
    with pytest.raises(ValueError, match="init must be one of"):
        init_table_(torch.empty(3, 2), "kaiming")


def test_tie_weights_shares_storage_and_sums_gradients(gen):
    emb = TokenEmbedding(40, 8)
    head = tie_weights(emb, nn.Linear(8, 40, bias=False))
    assert head.weight is emb.weight
    assert head.weight.data_ptr() == emb.weight.data_ptr()
    assert sum(p.numel() for p in nn.ModuleList([emb, head]).parameters()) == 40 * 8
    ids = torch.randint(0, 40, (2, 5), generator=gen)
    head(emb(ids)).sum().backward()
    # gradient through the head alone is sum over tokens of the hidden vectors for every row: all rows non-zero
    assert torch.count_nonzero(emb.weight.grad.norm(dim=1)) == 40


def test_tie_weights_rejects_wrong_shape():
    with pytest.raises(ValueError, match=r"nn.Linear\(d_model, vocab_size\)"):
        tie_weights(TokenEmbedding(40, 8), nn.Linear(40, 8))


@pytest.mark.parametrize(
    "bad, error, words",
    [
        (torch.tensor([[1, 40]]), ValueError, ["40", "vocabulary", "vocab_size"]),
        (torch.tensor([[1, -2]]), ValueError, ["negative", "-2"]),
        (torch.tensor([[1.0, 2.0]]), TypeError, ["integer", "float32"]),
        (torch.tensor([[True, False]]), TypeError, ["integer", "bool"]),
        ([[1, 2]], TypeError, ["torch.Tensor", "list"]),
    ],
)
def test_bad_ids_raise_clear_errors(bad, error, words):
    with pytest.raises(error) as info:
        TokenEmbedding(40, 8)(bad)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("padding_idx", [40, -1, 100])
def test_padding_idx_outside_vocabulary(padding_idx):
    with pytest.raises(ValueError, match=rf"padding_idx={padding_idx}.*\[0, 40\)"):
        TokenEmbedding(40, 8, padding_idx=padding_idx)


def test_meta_device_shapes():
    emb = TokenEmbedding(50_000, 1024, padding_idx=0, device="meta")
    out = emb(torch.empty(4, 128, dtype=torch.long, device="meta"))
    assert out.shape == (4, 128, 1024) and out.device.type == "meta"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_table_dtype_is_followed(dtype, gen):
    emb = TokenEmbedding(20, 8, dtype=dtype)
    assert emb(torch.randint(0, 20, (2, 3), generator=gen)).dtype == dtype
