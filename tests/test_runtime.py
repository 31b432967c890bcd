import random

import numpy as np
import pytest
import torch

from course_embed import deterministic, pick_device, seed_everything, setup, single_thread


def test_pick_device_default(monkeypatch):
    monkeypatch.delenv("COURSE_EMBED_DEVICE", raising=False)
    assert pick_device().type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_pick_device_honours_environment(monkeypatch):
    monkeypatch.setenv("COURSE_EMBED_DEVICE", "cpu")
    assert pick_device() == torch.device("cpu")
    assert pick_device("meta") == torch.device("meta")


def test_pick_device_bad_values(monkeypatch):
    monkeypatch.setenv("COURSE_EMBED_DEVICE", "gpu0")
    with pytest.raises(ValueError, match="COURSE_EMBED_DEVICE='gpu0' is not a device name"):
        pick_device()
    if not torch.cuda.is_available():
        monkeypatch.setenv("COURSE_EMBED_DEVICE", "cuda")
        with pytest.raises(ValueError, match="is_available"):
            pick_device()


def test_seed_everything_repeats_every_generator():
    def draw():
        gen = seed_everything(7)
        return random.random(), np.random.rand(), torch.rand(3), torch.rand(2, generator=gen)

    first, second = draw(), draw()
    assert first[0] == second[0] and first[1] == second[1]
    assert torch.equal(first[2], second[2]) and torch.equal(first[3], second[3])


def test_deterministic_and_setup():
    before = torch.are_deterministic_algorithms_enabled()
    try:
        deterministic(3)
        assert torch.are_deterministic_algorithms_enabled()
        a = torch.rand(4)
        assert isinstance(setup(3), torch.device)
        assert torch.equal(torch.rand(4), a)
    finally:
        torch.use_deterministic_algorithms(before)


def test_single_thread_runs_the_block_on_one_thread_and_restores_the_count():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with single_thread():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(KeyError), single_thread():
            raise KeyError("inside")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
