"""The training-step profile, the chunked cross-entropy (against F.cross_entropy in float64) and the memory meter."""

import os

import pytest
import torch
import torch.nn.functional as F

from course_embed.lab import profile_step


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_chunked_cross_entropy_equals_the_full_loss_and_gradients(gen, chunk):
    h = torch.randn(50, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(300, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 300, (50,), generator=gen)
    full = F.cross_entropy(h @ w.T, t)
    gh, gw = torch.autograd.grad(full * 3.0, (h, w))
    loss = profile_step.chunked_cross_entropy(h, w, t, chunk)
    ch, cw = torch.autograd.grad(loss * 3.0, (h, w))
    torch.testing.assert_close(loss, full, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(ch, gh, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(cw, gw, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="chunk must be a positive"):
        profile_step.chunked_cross_entropy(h, w, t, 0)


def test_peak_memory_sees_a_large_temporary():
    with profile_step.PeakMemory() as meter:
        big = torch.ones(1 << 22)  # 16 MiB
        del big
    assert meter.peak >= (1 << 24)
    with profile_step.PeakMemory() as small:
        torch.ones(16).sum()
    assert small.peak < (1 << 20)


def test_tied_model_shares_the_table_and_the_profile_covers_every_phase(gen):
    torch.manual_seed(0)
    model = profile_step.TinyGPT(97, 16, layers=1, heads=2, max_len=12, tied=True)
    assert model.head.weight is model.embed.token.weight
    ids = torch.randint(0, 97, (2, 12), generator=gen)
    targets = torch.randint(0, 97, (2, 12), generator=gen)
    loss = model(ids, targets)
    assert loss.shape == () and 3.0 < loss.item() < 7.0  # about log(97) at initialisation
    phases = profile_step.profile_step(model, ids, targets)
    assert list(phases) == list(profile_step.PHASES)
    assert all(ms > 0 for ms in phases.values())
    untied = profile_step.TinyGPT(97, 16, layers=1, heads=2, max_len=12, tied=False)
    assert untied.head.weight is not untied.embed.token.weight


def test_backward_nodes_count_in_the_phase_whose_forward_created_them(gen):
    # the blocks' attention projections also run mm (not addmm): a rule by node name sent them to the head
    from collections import Counter

    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = profile_step.TinyGPT(97, 16, layers=2, heads=2, max_len=12, tied=False)
    ids = torch.randint(0, 97, (2, 12), generator=gen)
    targets = torch.randint(0, 97, (2, 12), generator=gen)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model(ids, targets).backward()
    events = prof.events()
    forward = profile_step._forward_phases(events)
    nodes = Counter(
        (e.name.split(": ", 1)[1], profile_step._backward_phase(e, forward))
        for e in events
        if profile_step._backward_phase(e, forward) is not None
    )
    assert nodes[("MmBackward0", "head + loss bwd")] == 1  # the head alone
    assert nodes[("MmBackward0", "blocks bwd")] >= 2  # the blocks' in-projections
    assert nodes[("NativeLayerNormBackward0", "head + loss bwd")] == 1  # the final norm
    assert nodes[("NativeLayerNormBackward0", "blocks bwd")] == 4
    assert nodes[("_LookupAddBackward", "input layer bwd")] == 1


def test_quiet_native_stderr_silences_descriptor_2_and_restores_it(capfd):
    with profile_step.quiet_native_stderr():
        os.write(2, b"hidden\n")
    os.write(2, b"shown\n")
    assert capfd.readouterr().err == "shown\n"
