"""The fused and compiled input layer equal the textbook computation, forward and backward, dense and sparse."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_embed import (
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    TransformerEmbedding,
    sinusoidal_table,
)
from course_embed.fusion import lookup_add_reference


def textbook(weight, ids, pe, scale, padding_idx=None):
    """``emb(ids) * sqrt(d) + pe[:s]``, the popular articles' version, in autograd-tracked eager ops."""
    return F.embedding(ids, weight, padding_idx) * scale + pe


@pytest.mark.parametrize("scale, padding_idx", [(True, None), (True, 0), (False, 3)])
def test_lookup_add_equals_textbook_forward_and_backward_float64(device, gen, scale, padding_idx):
    emb = TokenEmbedding(60, 16, padding_idx=padding_idx, scale=scale, dtype=torch.float64).to(device)
    ids = torch.randint(0, 60, (3, 11), generator=gen).to(device)
    ids[0, :4] = 0 if padding_idx is None else padding_idx
    pe = torch.randn(11, 16, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    upstream = torch.randn(3, 11, 16, generator=gen, dtype=torch.float64).to(device)

    fused = emb.lookup_add(ids, pe)
    (fused * upstream).sum().backward()
    grads = emb.weight.grad.clone(), pe.grad.clone()
    emb.weight.grad = pe.grad = None

    reference = textbook(emb.weight, ids, pe, emb.multiplier, padding_idx)
    (reference * upstream).sum().backward()
    torch.testing.assert_close(fused, reference, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(grads[0], emb.weight.grad, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(grads[1], pe.grad, rtol=1e-14, atol=1e-14)
    if padding_idx is not None:
        assert torch.count_nonzero(grads[0][padding_idx]) == 0


def test_lookup_add_float32_within_one_rounding(device, gen):
    emb = TokenEmbedding(1000, 128).to(device)
    ids = torch.randint(0, 1000, (4, 32), generator=gen).to(device)
    pe = sinusoidal_table(32, 128, device=device)
    exact = textbook(emb.weight.double(), ids, pe.double(), math.sqrt(128))
    # one fused multiply-add rounds once; the textbook rounds twice: both within a few float32 ulps of exact
    for out in (emb.lookup_add(ids, pe), textbook(emb.weight, ids, pe, math.sqrt(128))):
        torch.testing.assert_close(out.double(), exact, rtol=2 * torch.finfo(torch.float32).eps, atol=1e-6)


def test_inference_path_equals_the_autograd_path(gen):
    emb = TokenEmbedding(100, 16, padding_idx=2)
    ids = torch.randint(0, 100, (3, 5), generator=gen)
    pe = torch.randn(5, 16, generator=gen)
    tracked = emb.lookup_add(ids, pe)
    assert tracked.requires_grad
    with torch.no_grad():
        plain = emb.lookup_add(ids, pe)
    assert not plain.requires_grad and torch.equal(plain, tracked)
    emb.weight.requires_grad_(False)  # a frozen table needs no graph either
    assert torch.equal(emb.lookup_add(ids, pe), tracked) and not emb.lookup_add(ids, pe).requires_grad


def test_scaled_forward_in_place_keeps_gradients(gen):
    emb = TokenEmbedding(40, 8, padding_idx=1, dtype=torch.float64)
    ids = torch.randint(0, 40, (2, 9), generator=gen)
    emb(ids).pow(2).sum().backward()
    expected = torch.zeros_like(emb.weight)
    w = emb.weight.detach()
    expected.index_add_(0, ids.flatten(), (2 * 8 * w[ids]).reshape(-1, 8))  # d/dW of sum((sqrt(8) W[ids])^2)
    expected[1] = 0
    torch.testing.assert_close(emb.weight.grad, expected, rtol=1e-14, atol=1e-14)


def test_sparse_gradient_equals_dense_and_nn_embedding(gen):
    ids = torch.randint(0, 300, (4, 20), generator=gen)
    pe = torch.randn(20, 24, generator=gen, dtype=torch.float64)
    dense = TokenEmbedding(300, 24, padding_idx=0, dtype=torch.float64)
    sparse = TokenEmbedding(300, 24, padding_idx=0, dtype=torch.float64, sparse=True)
    sparse.load_state_dict(dense.state_dict())
    ref = nn.Embedding(300, 24, padding_idx=0, sparse=True, dtype=torch.float64)
    ref.weight.data.copy_(dense.weight.data)
    dense.lookup_add(ids, pe).sin().sum().backward()
    sparse.lookup_add(ids, pe).sin().sum().backward()
    (ref(ids) * math.sqrt(24) + pe).sin().sum().backward()
    assert sparse.weight.grad.layout == torch.sparse_coo
    torch.testing.assert_close(sparse.weight.grad.to_dense(), dense.weight.grad, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(sparse.weight.grad.to_dense(), ref.weight.grad.to_dense(), rtol=1e-13, atol=1e-13)
    assert "sparse=True" in repr(sparse) and "sparse" not in repr(dense)


@pytest.mark.parametrize("opt", ["sgd", "sparse_adam"])
def test_sparse_training_step_matches_nn_embedding(gen, opt):
    m = TransformerEmbedding(500, 32, dropout=0.0, sparse=True, dtype=torch.float64)
    ref = nn.Embedding(500, 32, sparse=True, dtype=torch.float64)
    ref.weight.data.copy_(m.token.weight.data)
    make = (lambda p: torch.optim.SGD(p, lr=0.1)) if opt == "sgd" else (lambda p: torch.optim.SparseAdam(p, lr=0.1))
    opt_m, opt_ref = make([m.token.weight]), make([ref.weight])
    pe = m.positions.encoding(12, dtype=torch.float64)  # the module's float32 table, cast up
    for _ in range(3):
        ids = torch.randint(0, 500, (3, 12), generator=gen)
        target = torch.randn(3, 12, 32, generator=gen, dtype=torch.float64)
        for optimizer, out in (
            (opt_m, lambda ids: m(ids)),
            (opt_ref, lambda ids: ref(ids) * math.sqrt(32) + pe),
        ):
            optimizer.zero_grad()
            F.mse_loss(out(ids), target).backward()
            optimizer.step()
    torch.testing.assert_close(m.token.weight, ref.weight, rtol=1e-12, atol=1e-12)


def test_learned_positions_receive_the_textbook_gradient(gen):
    m = TransformerEmbedding(50, 16, position="learned", max_len=20, dropout=0.0, dtype=torch.float64)
    ids = torch.randint(0, 50, (3, 7), generator=gen)
    upstream = torch.randn(3, 7, 16, generator=gen, dtype=torch.float64)
    (m(ids, offset=5) * upstream).sum().backward()
    expected_pos = torch.zeros(20, 16, dtype=torch.float64)
    expected_pos[5:12] = upstream.sum(0)
    torch.testing.assert_close(m.positions.weight.grad, expected_pos, rtol=1e-14, atol=1e-14)
    expected_tok = torch.zeros(50, 16, dtype=torch.float64).index_add_(0, ids.flatten(), upstream.reshape(-1, 16))
    torch.testing.assert_close(m.token.weight.grad, expected_tok * 4.0, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_table_output_within_its_rounding(gen, dtype):
    m = TransformerEmbedding(100, 64, dropout=0.0, dtype=dtype)
    ids = torch.randint(0, 100, (2, 40), generator=gen)
    out = m(ids, offset=300)
    assert out.dtype == dtype
    exact = m.token.weight.double()[ids] * 8.0 + sinusoidal_table(40, 64, offset=300, dtype=torch.float64)
    # the table rows are exact in `dtype`; only the sum and the cast position rows are rounded (2 half ulps)
    torch.testing.assert_close(out.double(), exact, rtol=2 * torch.finfo(dtype).eps, atol=2 * torch.finfo(dtype).eps)


def test_sinusoidal_cast_is_cached_and_refreshed():
    pe = SinusoidalPositionalEncoding(16, max_len=8)
    first = pe.encoding(4, dtype=torch.bfloat16)
    again = pe.encoding(6, offset=1, dtype=torch.bfloat16)
    assert first.untyped_storage().data_ptr() == again.untyped_storage().data_ptr()  # one cast, reused
    assert pe.encoding(4).data_ptr() == pe.table.data_ptr()  # float32: the table itself, no copy
    grown = pe.encoding(20, dtype=torch.bfloat16)  # past the table: it grows, the cast is redone
    assert grown.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
    assert torch.equal(grown, sinusoidal_table(20, 16).to(torch.bfloat16))
    pe.double()  # module.to replaces the buffer: the cache must not serve, nor keep, the old one
    assert not pe._casts
    assert torch.equal(pe.encoding(20, dtype=torch.bfloat16), sinusoidal_table(20, 16).to(torch.bfloat16))


@pytest.mark.parametrize(
    "addend, error, match",
    [
        (torch.zeros(5, 8, dtype=torch.float64), TypeError, "table's dtype torch.float32"),
        ([[0.0] * 8] * 5, TypeError, "list"),
        (torch.zeros(6, 8), ValueError, r"does not broadcast to the output shape \(2, 5, 8\)"),
        (torch.zeros(3, 2, 5, 8), ValueError, "does not broadcast"),
    ],
)
def test_lookup_add_rejects_bad_addend(addend, error, match):
    with pytest.raises(error, match=match):
        TokenEmbedding(20, 8).lookup_add(torch.zeros(2, 5, dtype=torch.long), addend)


def test_lookup_add_still_checks_ids():
    with pytest.raises(ValueError, match="outside the vocabulary"):
        TokenEmbedding(20, 8).lookup_add(torch.tensor([[3, 20]]), torch.zeros(2, 8))


def test_compile_and_sparse_do_not_combine():
    with pytest.raises(ValueError, match="compile=True does not support sparse=True"):
        TransformerEmbedding(20, 8, compile=True, sparse=True)


def test_compiled_path_equals_textbook_forward_and_backward(gen):
    m = TransformerEmbedding(64, 16, dropout=0.0, padding_idx=0, compile=True)
    eager = TransformerEmbedding(64, 16, dropout=0.0, padding_idx=0)
    eager.load_state_dict(m.state_dict())
    ids = torch.randint(0, 64, (2, 6), generator=gen)
    ids[0, -2:] = 0
    upstream = torch.randn(2, 6, 16, generator=gen)
    out = m(ids, offset=1)
    (out * upstream).sum().backward()
    ref = lookup_add_reference(ids, eager.token.weight, sinusoidal_table(6, 16, offset=1), 4.0, 0)
    (ref * upstream).sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(m.token.weight.grad, eager.token.weight.grad, rtol=1e-6, atol=1e-6)
    assert "compile=True" in repr(m)
    with pytest.raises(ValueError, match="outside the vocabulary"):  # the id check stays eager
        m(torch.tensor([[1, 64]]))
