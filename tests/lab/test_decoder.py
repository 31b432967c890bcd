import pytest
import torch

from course_embed.lab.decoder import SCHEMES, TinyLM


@pytest.mark.parametrize("scheme", SCHEMES)
def test_models_are_causal_and_sized_alike(gen, scheme):
    torch.manual_seed(0)
    model = TinyLM(16, 2, 2, scheme, max_len=24, rope_base=100.0).eval()
    ids = torch.randint(0, 256, (2, 24), generator=gen)
    changed = ids.clone()
    changed[:, 15:] = (changed[:, 15:] + 1) % 256
    with torch.no_grad():
        logits, logits_changed = model(ids), model(changed)
    assert logits.shape == (2, 24, 256)
    torch.testing.assert_close(logits[:, :15], logits_changed[:, :15], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(logits[:, 15:], logits_changed[:, 15:])
    extra = {"learned": 24 * 16, "t5": 32 * 2}.get(scheme, 0)  # one T5 table shared by the layers
    base = sum(p.numel() for p in TinyLM(16, 2, 2, "nope", 24).parameters())
    assert sum(p.numel() for p in model.parameters()) == base + extra


def test_nope_sees_order_only_through_the_causal_mask():
    """Without positions, the last token's output is the same for any order of the tokens before it."""
    torch.manual_seed(0)
    model = TinyLM(16, 2, 1, "nope", max_len=8).eval()
    ids = torch.tensor([[5, 9, 200, 31, 7]])
    swapped = torch.tensor([[9, 200, 5, 31, 7]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids)[:, -1], model(swapped)[:, -1], rtol=1e-5, atol=1e-5)
