import io
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_embed import TransformerEmbedding, sinusoidal_table
from course_embed.checks import check_ids


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


def textbook(model, ids, offset=0, dtype=None):
    """The textbook layer from the model's own tables, in ``dtype`` (default: the table's)."""
    weight = model.token.weight.detach()
    dtype = dtype or weight.dtype
    pe = model.positions.encoding(ids.shape[1], offset, dtype=dtype, device=weight.device).detach()
    return F.embedding(ids, weight.to(dtype)) * model.token.multiplier + pe


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "grad"])
def test_every_mode_equals_the_textbook_within_one_rounding(device, gen, position, dtype, mode):
    model = TransformerEmbedding(500, 48, position=position, dropout=0.0, max_len=40, dtype=dtype, padding_idx=0)
    model = model.to(device).eval()
    ids = torch.randint(0, 500, (3, 17), generator=gen).to(device)
    ids[0, :3] = 0
    context = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode, "grad": torch.enable_grad}[mode]
    eps = torch.finfo(dtype).eps
    for offset, length in ((0, 17), (5, 17), (0, 9)):
        with context():
            out = model(ids[:, :length], offset=offset)
        assert out.dtype == dtype and out.shape == (3, length, 48)
        exact = textbook(model, ids[:, :length], offset, dtype=torch.float64)
        torch.testing.assert_close(out.detach().double(), exact, rtol=2 * eps, atol=8 * eps)


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_inference_sees_every_update_of_the_tables(gen, position):
    model = TransformerEmbedding(1000, 64, position=position, dropout=0.0, max_len=4096).eval()
    ids = torch.randint(0, 1000, (2, 30), generator=gen)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(2):
        with torch.no_grad():
            torch.testing.assert_close(model(ids), textbook(model, ids))
        model(ids).square().sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    with torch.no_grad():
        model(ids)  # a first inference call, then writes that bypass autograd's version counters
    model.token.weight.data.normal_()
    if position == "learned":
        model.positions.weight.data.normal_()  # the idiom many init functions use
    with torch.no_grad():
        torch.testing.assert_close(model(ids), textbook(model, ids))
    other = TransformerEmbedding(1000, 64, position=position, dropout=0.0, max_len=4096)
    model.load_state_dict(other.state_dict())
    with torch.inference_mode():
        torch.testing.assert_close(model(ids), textbook(other, ids))


def saved_bytes(obj) -> int:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.tell()


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_a_parameter_s_storage_is_exactly_its_shape(position):
    model = TransformerEmbedding(1000, 64, position=position, dropout=0.0, max_len=4096, layer_norm=True)
    for stage in ("built", "double"):
        if stage == "double":
            model = model.double()
        for p in model.parameters():
            assert p.untyped_storage().nbytes() == p.nbytes, stage
        weight = model.token.weight
        assert weight.nbytes <= saved_bytes(weight) <= weight.nbytes + 4096, stage  # the table plus pickle framing
        state = model.state_dict()
        params = sum(p.nbytes for p in model.parameters())
        assert sum(t.untyped_storage().nbytes() for t in state.values()) == params, stage
        assert saved_bytes(state) <= params + 8192, stage


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"position": "learned"}, {"position": None}, {"fusion": "concat"}, {"layer_norm": True}],
)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "grad"])
@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (0, 0)])
def test_empty_batches_and_empty_sequences(kwargs, mode, shape):
    model = TransformerEmbedding(50, 16, dropout=0.1, max_len=8, **kwargs).eval()
    context = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode, "grad": torch.enable_grad}[mode]
    with context():
        out = model(torch.zeros(shape, dtype=torch.long), offset=2)
    assert out.shape == (*shape, 16) and out.dtype == torch.float32


def test_training_path_gives_gradients_to_the_token_table_only(gen):
    model = TransformerEmbedding(50, 8, dropout=0.0, max_len=10, dtype=torch.float64)
    ids = torch.randint(0, 50, (3, 10), generator=gen)
    upstream = torch.randn(3, 10, 8, generator=gen, dtype=torch.float64)
    (model(ids) * upstream).sum().backward()
    weight = model.token.weight.detach().clone().requires_grad_()
    pe = model.positions.encoding(10, 0, dtype=torch.float64)
    ((F.embedding(ids, weight) * math.sqrt(8) + pe) * upstream).sum().backward()
    torch.testing.assert_close(model.token.weight.grad, weight.grad, rtol=1e-14, atol=1e-14)
    assert [n for n, p in model.named_parameters() if p.grad is not None] == ["token.weight"]


@pytest.mark.cuda
def test_cuda_id_check_does_not_synchronise():
    ids = torch.randint(0, 100, (4, 16), device="cuda")
    model = TransformerEmbedding(100, 8, dropout=0.0, max_len=16, device="cuda").eval()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any host synchronisation now raises
    try:
        check_ids(ids, 100)
        with torch.inference_mode():
            out = model(ids)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(out, textbook(model, ids))


@pytest.mark.cuda
def test_cuda_bad_id_fails_on_the_device():
    code = (
        "import torch\nfrom course_embed.checks import check_ids\n"
        "check_ids(torch.tensor([1, 100], device='cuda'), 100)\ntorch.cuda.synchronize()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode != 0 and "outside the vocabulary" in result.stderr
