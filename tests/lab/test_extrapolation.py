"""The extrapolation experiment: its task, its models, and the script that produces the chapter's shipped numbers."""

import importlib.util
import json
import math
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from course_embed.lab.extrapolation import (
    EXTENSIONS,
    IGNORE,
    SCHEMES,
    ExperimentConfig,
    TinyCausalLM,
    evaluate,
    repeat_batch,
    rope_scaling_for,
    run_experiment,
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "extrapolation.py"
SHIPPED = ROOT / "book" / "data" / "extrapolation.json"


def test_repeat_batch_is_a_repeated_block_with_masked_first_block(gen):
    ids, targets = repeat_batch(50, 64, 100, gen)
    assert ids.shape == targets.shape == (50, 64) and ids.dtype == torch.long
    for row, target in zip(ids.tolist(), targets.tolist()):
        period = next(p for p in range(1, 65) if all(row[t] == row[t - p] for t in range(p, 64)))
        assert 8 <= period <= 32 and len(set(row[:period])) == period  # distinct tokens within the block
        for t in range(64):
            expected = row[t + 1] if t + 1 < 64 and t + 1 >= period else IGNORE
            assert target[t] == expected


def test_repeat_batch_is_reproducible_and_covers_the_period_range():
    a = repeat_batch(400, 32, 40, torch.Generator().manual_seed(3))
    b = repeat_batch(400, 32, 40, torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    first_target = (a[1] != IGNORE).float().argmax(dim=1) + 1  # the period: first predictable position
    assert set(first_target.tolist()) == set(range(4, 17))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_models_are_causal(device, gen, scheme):
    torch.manual_seed(0)
    model = TinyCausalLM(30, 16, 2, 2, scheme, max_len=24).to(device).eval()
    ids = torch.randint(0, 30, (2, 24), generator=gen).to(device)
    changed = ids.clone()
    changed[:, 15:] = (changed[:, 15:] + 1) % 30
    with torch.no_grad():
        logits, logits_changed = model(ids), model(changed)
    assert logits.shape == (2, 24, 30)
    torch.testing.assert_close(logits[:, :15], logits_changed[:, :15], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(logits[:, 15:], logits_changed[:, 15:])


@pytest.mark.parametrize("scheme", SCHEMES)
def test_schemes_differ_only_in_position_parameters(scheme):
    base = {n for n, _ in TinyCausalLM(30, 16, 2, 2, "rope", max_len=24).named_parameters()}
    names = {n for n, _ in TinyCausalLM(30, 16, 2, 2, scheme, max_len=24).named_parameters()}
    extra = {"learned": {"embed.positions.weight"}, "t5": {"blocks.0.attn.t5.weight", "blocks.1.attn.t5.weight"}}
    assert names == base | extra.get(scheme, set())


def test_learned_positions_are_interpolated_for_longer_sequences(gen):
    torch.manual_seed(0)
    model = TinyCausalLM(30, 16, 2, 1, "learned", max_len=16)
    table = model.embed.positions.weight.detach().clone()
    with pytest.raises(ValueError, match="max_len=16"):
        model(torch.zeros(1, 32, dtype=torch.long))
    model.resize_positions(31)
    torch.testing.assert_close(model.embed.positions.weight[::2].detach(), table)
    assert model(torch.zeros(1, 31, dtype=torch.long)).shape == (1, 31, 30)


def test_rope_scaling_reaches_every_layer():
    model = TinyCausalLM(30, 16, 2, 2, "rope", max_len=16)
    model.set_rope_scaling(rope_scaling_for("yarn", 4, 16))
    for block in model.blocks:
        assert block.attn.rope.rope_scaling == {"rope_type": "yarn", "factor": 4.0,
                                                "original_max_position_embeddings": 16}
        assert block.attn.rope.attention_factor == pytest.approx(0.1 * math.log(4) + 1)
    assert rope_scaling_for("none", 4, 16) is None
    assert rope_scaling_for("linear", 2, 16) == {"rope_type": "linear", "factor": 2.0}


def test_evaluate_uses_the_same_sequences_for_every_model():
    torch.manual_seed(0)
    model = TinyCausalLM(40, 16, 2, 1, "alibi", max_len=32)
    first, second = evaluate(model, 32, 8, 3, seed=5), evaluate(model, 32, 8, 8, seed=5)
    assert first["loss"] == pytest.approx(second["loss"], rel=1e-5)  # batching does not change the data
    assert first["accuracy"] == second["accuracy"] and 0 <= first["accuracy"] <= 1
    assert first["accuracy"] < 0.2  # an untrained model does not copy


def test_bad_configuration_and_arguments():
    with pytest.raises(ValueError, match="heads of even width"):
        ExperimentConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="vocab_size=64 cannot fill"):
        ExperimentConfig(vocab_size=64)
    with pytest.raises(ValueError, match=r"unknown schemes or extensions \['nope'\]"):
        ExperimentConfig(schemes=("rope", "nope"))
    with pytest.raises(ValueError, match="extension_factor=3"):
        ExperimentConfig(extension_factor=3)
    with pytest.raises(ValueError, match="position must be one of"):
        TinyCausalLM(30, 16, 2, 1, "nope", max_len=16)
    with pytest.raises(ValueError, match="rope_scaling applies to position='rope' only"):
        TinyCausalLM(30, 16, 2, 1, "alibi", max_len=16, rope_scaling={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(ValueError, match="needs a RoPE model"):
        TinyCausalLM(30, 16, 2, 1, "alibi", max_len=16).set_rope_scaling(None)
    with pytest.raises(ValueError, match="needs a learned-position model"):
        TinyCausalLM(30, 16, 2, 1, "rope", max_len=16).resize_positions(32)
    with pytest.raises(ValueError, match="multiple of 8"):
        repeat_batch(2, 20, 50, torch.Generator())


TINY = dict(vocab_size=32, train_len=16, eval_factors=(1, 2), d_model=16, n_heads=2, n_layers=1, steps=4,
            batch_size=4, warmup=2, eval_sequences=4, eval_batch_size=4, extension_factor=2, finetune_steps=2)


@pytest.fixture
def one_thread():
    """Models this small run fastest on one thread (on a busy machine, many times faster than on two)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_experiment_is_deterministic(one_thread):
    cfg = ExperimentConfig(**TINY)
    first = run_experiment(cfg, progress=False).to_dict()
    assert first == run_experiment(cfg, progress=False).to_dict()
    assert set(first["schemes"]) == set(SCHEMES) and set(first["extension"]) == set(EXTENSIONS)
    assert first["lengths"] == [16, 32]


def check_results(data: dict, cfg: ExperimentConfig) -> None:
    assert data["config"] == json.loads(json.dumps(asdict(cfg)))  # the shipped numbers come from this config
    assert data["lengths"] == [f * cfg.train_len for f in cfg.eval_factors]
    rows = [*data["schemes"].values()] + [r for ext in data["extension"].values() for r in ext.values()]
    assert len(data["schemes"]) == len(cfg.schemes) and len(data["extension"]) == len(cfg.extensions)
    for row in rows:
        assert len(row) == len(data["lengths"])
        for point in row:
            assert math.isfinite(point["loss"]) and point["loss"] >= 0 and 0 <= point["accuracy"] <= 1


def test_script_quick_run_end_to_end(tmp_path):
    """The reduced version of the script that produced the shipped results, run as a reader would run it."""
    out = tmp_path / "quick.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out), "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["generated_by"] == "python scripts/extrapolation.py --quick"
    spec = importlib.util.spec_from_file_location("extrapolation_script", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    check_results(data, ExperimentConfig(**script.QUICK))


def test_shipped_results_match_the_script_defaults():
    data = json.loads(SHIPPED.read_text())
    assert data["generated_by"] == "python scripts/extrapolation.py" and data["threads"] == 1
    check_results(data, ExperimentConfig())
