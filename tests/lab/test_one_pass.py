"""The lab's one-pass input layer equals the textbook bit for bit, and its three caveats are real."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_embed.lab import one_pass


def textbook(model, ids, offset=0, dtype=None):
    """The textbook layer from the module's own tables, in ``dtype`` (default: the table's)."""
    weight = model.token.weight.detach()
    dtype = dtype or weight.dtype
    pe = model.positions.encoding(ids.shape[1], offset, dtype=dtype, device=weight.device).detach()
    return F.embedding(ids, weight.to(dtype)) * math.sqrt(weight.shape[1]) + pe


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_one_pass_equals_the_textbook_bit_for_bit(device, gen, position, dtype, mode):
    model = one_pass.OnePassEmbedding(500, 48, position=position, max_len=40, dtype=dtype).to(device)
    ids = torch.randint(0, 500, (3, 17), generator=gen).to(device)
    context = torch.no_grad() if mode == "no_grad" else torch.inference_mode()
    for offset, length in ((0, 17), (5, 17), (0, 9)):
        with context:
            out = model(ids[:, :length], offset=offset)
        assert out.dtype == dtype and out.shape == (3, length, 48)
        assert torch.equal(out, textbook(model, ids[:, :length], offset))
    exact = textbook(model, ids, dtype=torch.float64)  # and within two roundings of the exact value
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(out.double(), exact[:, :9], rtol=2 * eps, atol=8 * eps)


def test_the_one_pass_is_one_embedding_bag(gen):
    model = one_pass.OnePassEmbedding(100, 8, max_len=16)
    ids = torch.randint(0, 100, (2, 16), generator=gen)
    with torch.no_grad(), torch.profiler.profile() as prof:
        model(ids)
    names = [e.name for e in prof.events()]
    assert names.count("aten::embedding_bag") == 1 and "aten::embedding" not in names and "aten::add" not in names


def test_with_a_graph_it_takes_the_two_pass_path_and_trains_the_table(gen):
    model = one_pass.OnePassEmbedding(50, 8, max_len=10, dtype=torch.float64)
    ids = torch.randint(0, 50, (3, 10), generator=gen)
    upstream = torch.randn(3, 10, 8, generator=gen, dtype=torch.float64)
    (model(ids) * upstream).sum().backward()
    weight = model.token.weight.detach().clone().requires_grad_()
    pe = model.positions.encoding(10, 0, dtype=torch.float64)
    ((F.embedding(ids, weight) * math.sqrt(8) + pe) * upstream).sum().backward()
    torch.testing.assert_close(model.token.weight.grad, weight.grad, rtol=1e-14, atol=1e-14)


def test_storage_and_state_dict_hold_the_spare_rows():
    model = one_pass.OnePassEmbedding(1000, 64, max_len=4096)
    assert model.token.weight.shape == (1000, 64) and one_pass.storage_rows(model) == 1000 + 4096
    plain = torch.nn.Embedding(1000, 64)
    table = 1000 * 64 * 4
    # torch.save writes the whole storage: about (1000 + 4096) / 1000 times a plain table's bytes
    assert one_pass.saved_bytes(plain) < 1.05 * table
    assert one_pass.saved_bytes(model) > (1000 + 4096) * 64 * 4
    assert one_pass.storage_rows(model.double()) == 1000 + 4096  # conversions make room again


def test_a_data_write_leaves_stale_rows_and_a_no_grad_write_does_not(gen):
    model = one_pass.OnePassEmbedding(100, 16, position="learned", max_len=12)
    ids = torch.randint(0, 100, (2, 12), generator=gen)
    assert one_pass.stale_after_data_write(model, ids) > 1e-3  # the old position rows are still read
    with torch.no_grad():
        model.positions.weight.mul_(2.0)  # bumps the version counter: the rows are copied again
        assert torch.equal(model(ids), textbook(model, ids))
    with pytest.raises(ValueError, match="position='learned'"):
        one_pass.stale_after_data_write(one_pass.OnePassEmbedding(10, 4, max_len=4), ids[:, :4] % 10)


def test_forward_writes_the_storage_at_every_new_length_or_offset(gen):
    model = one_pass.OnePassEmbedding(100, 8, max_len=16)
    ids = torch.randint(0, 100, (2, 8), generator=gen)
    assert one_pass.forward_writes_storage(model, ids, offset=0)
    assert not one_pass.forward_writes_storage(model, ids, offset=0)  # same rows: not copied again
    assert one_pass.forward_writes_storage(model, ids, offset=3)


def test_bad_input_is_rejected():
    model = one_pass.OnePassEmbedding(100, 8, max_len=8)
    with torch.inference_mode(), pytest.raises(ValueError, match="id 100, outside the vocabulary"):
        model(torch.tensor([[1, 100]]))  # would read a position row
    with pytest.raises(ValueError, match=r"ids must have shape \(batch, seq\)"):
        model(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="position must be"):
        one_pass.OnePassEmbedding(10, 4, position="rotary")
    with pytest.raises(ValueError, match="max_len must be a positive integer"):
        one_pass.OnePassEmbedding(10, 4, max_len=0)


def test_longer_than_max_len_falls_back_to_two_passes(gen):
    model = one_pass.OnePassEmbedding(100, 16, max_len=8)
    ids = torch.randint(0, 100, (2, 12), generator=gen)
    with torch.no_grad():
        out = model(ids)
    torch.testing.assert_close(out, textbook(model, ids), rtol=2 * torch.finfo(torch.float32).eps, atol=1e-6)
