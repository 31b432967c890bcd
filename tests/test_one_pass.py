"""The one-pass inference path of ``TransformerEmbedding`` (embedding_bag over the table and the position rows stored
after it) equals the textbook ``W[ids] * sqrt(d) + pe`` bit for bit in float32/float64 and stays fresh."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_embed import TransformerEmbedding
from course_embed.checks import check_ids


def textbook(model, ids, offset=0, dtype=None):
    """The textbook layer from the model's own tables, in ``dtype`` (default: the table's)."""
    weight = model.token.weight.detach()
    dtype = dtype or weight.dtype
    pe = model.positions.encoding(ids.shape[1], offset, dtype=dtype, device=weight.device).detach()
    return F.embedding(ids, weight.to(dtype)) * model.token.multiplier + pe


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_one_pass_equals_the_textbook_bit_for_bit(device, gen, position, dtype, mode):
    model = (
        TransformerEmbedding(500, 48, position=position, dropout=0.0, max_len=40, dtype=dtype, padding_idx=0)
        .to(device)
        .eval()
    )
    ids = torch.randint(0, 500, (3, 17), generator=gen).to(device)
    ids[0, :3] = 0
    context = torch.no_grad() if mode == "no_grad" else torch.inference_mode()
    for offset, length in ((0, 17), (5, 17), (0, 9)):
        with context:
            out = model(ids[:, :length], offset=offset)
        assert out.dtype == dtype and out.shape == (3, length, 48)
        assert torch.equal(out, textbook(model, ids[:, :length], offset))
    exact = textbook(model, ids, dtype=torch.float64)  # and within one rounding of the exact value
    eps = torch.finfo(dtype).eps  # two roundings of values of size up to a few units
    torch.testing.assert_close(out.double(), exact[:, :9], rtol=2 * eps, atol=8 * eps)


def test_the_table_keeps_its_shape_and_storage_has_room():
    model = TransformerEmbedding(100, 8, dropout=0.0, max_len=16)
    weight = model.token.weight
    assert weight.shape == (100, 8) and weight.is_contiguous() and weight.storage_offset() == 0
    assert weight.untyped_storage().nbytes() == (100 + 16) * 8 * 4
    assert model.state_dict()["token.weight"].shape == (100, 8)
    model = model.double()  # conversions give new storage: room is made again
    assert model.token.weight.untyped_storage().nbytes() == (100 + 16) * 8 * 8
    concat = TransformerEmbedding(100, 8, fusion="concat", dropout=0.0)
    assert concat.token.weight.untyped_storage().nbytes() == 100 * 4 * 4  # no room needed: no one-pass path


def test_one_pass_sees_every_update_of_the_tables(gen):
    model = TransformerEmbedding(200, 16, position="learned", dropout=0.0, max_len=20).eval()
    ids = torch.randint(0, 200, (2, 20), generator=gen)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(2):
        with torch.no_grad():
            assert torch.equal(model(ids), textbook(model, ids))
        model(ids).square().sum().backward()  # graph path: two passes, gradients to both tables
        optimizer.step()
        optimizer.zero_grad()
    other = TransformerEmbedding(200, 16, position="learned", dropout=0.0, max_len=20)
    model.load_state_dict(other.state_dict())  # copies in place: the room survives
    assert model.token.weight.untyped_storage().nbytes() == (200 + 20) * 16 * 4
    with torch.no_grad():
        assert torch.equal(model(ids), textbook(other, ids))
        model.positions.weight.mul_(2.0)  # in place on the position table
        assert torch.equal(model(ids), textbook(model, ids))


@pytest.mark.parametrize("how", ["assign", "too_long"])
def test_falls_back_to_two_passes_when_there_is_no_room(gen, how):
    model = TransformerEmbedding(100, 16, dropout=0.0, max_len=8).eval()
    ids = torch.randint(0, 100, (2, 8 if how == "assign" else 12), generator=gen)
    if how == "assign":
        model.load_state_dict({"token.weight": torch.randn(100, 16, generator=gen)}, strict=False, assign=True)
    with torch.no_grad():
        out = model(ids)
    torch.testing.assert_close(out, textbook(model, ids), rtol=2 * torch.finfo(torch.float32).eps, atol=1e-6)


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


def test_one_pass_rejects_ids_that_would_read_position_rows():
    model = TransformerEmbedding(100, 8, dropout=0.0, max_len=8).eval()
    with torch.inference_mode(), pytest.raises(ValueError, match="id 100, outside the vocabulary"):
        model(torch.tensor([[1, 100]]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_one_pass_is_rounded_once(gen, dtype):
    model = TransformerEmbedding(300, 64, dropout=0.0, max_len=32, dtype=dtype).eval()
    ids = torch.randint(0, 300, (4, 32), generator=gen)
    with torch.no_grad():
        out = model(ids)
    pe = model.positions.encoding(32, 0, dtype=dtype).double()  # the stored (rounded) position rows
    exact = F.embedding(ids, model.token.weight.detach().double()) * model.token.multiplier + pe
    # summed in float32, rounded once: within half a spacing (plus float32 error) of the exact value
    half_spacing = exact.abs() * torch.finfo(dtype).eps / 2 + 1e-6
    assert ((out.double() - exact).abs() <= half_spacing * 1.01).all()


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
    assert torch.equal(out, textbook(model, ids))


@pytest.mark.cuda
def test_cuda_bad_id_fails_on_the_device():
    import subprocess
    import sys

    code = (
        "import torch\nfrom course_embed.checks import check_ids\n"
        "check_ids(torch.tensor([1, 100], device='cuda'), 100)\ntorch.cuda.synchronize()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode != 0 and "outside the vocabulary" in result.stderr
