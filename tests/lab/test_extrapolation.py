"""Chapter 5's study: its corpus and probes, its models, and the script that produces the shipped results."""

import hashlib
import importlib.util
import json
import math
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from course_embed.lab import corpus
from course_embed.lab.corpus import IGNORE, KEY_DIGITS
from course_embed.lab.decoder import TinyLM
from course_embed.lab.extrapolation import (
    StudyConfig,
    extensions,
    measure,
    parse_model,
    run_task,
)
from course_embed.rotary import rope_parameters, yarn_attention_factor

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "extrapolation.py"
SHIPPED = ROOT / "book" / "data" / "extrapolation.json"


def load_script():
    spec = importlib.util.spec_from_file_location("extrapolation_script", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_corpus_is_this_interpreters_pydoc_topics():
    from pydoc_data import topics

    data = corpus.corpus_bytes()
    info = corpus.corpus_info(data)
    assert info["sha256"] == hashlib.sha256(data).hexdigest() and info["bytes"] == len(data) > 300_000
    assert info["topics"] == len(topics.topics) and info["python"] == sys.version.split()[0]
    assert data.decode("utf-8").startswith(topics.topics[sorted(topics.topics)[0]])
    train, valid = corpus.split(data)
    assert len(train) + len(valid) == len(data) and len(valid) == len(data) - int(len(data) * 0.9)
    assert bytes(valid[:100].tolist()) == data[len(train) : len(train) + 100]


def test_text_batches_and_eval_windows_predict_the_next_byte(gen):
    text = torch.arange(1000) % 256
    ids, targets = corpus.text_batch(text, 8, 32, gen)
    assert ids.shape == targets.shape == (8, 32)
    assert torch.equal(targets, (ids + 1) % 256)  # consecutive windows of the text
    for length in (16, 64):
        ids, targets = corpus.eval_windows(text, length, 256)
        assert ids.shape == (256 // length, length) and torch.equal(ids.flatten(), text[:256])
        assert torch.equal(targets.flatten(), text[1:257])  # every length scores the same bytes


@pytest.mark.parametrize("periods", [None, (8, 32)])
def test_repeat_batch_repeats_a_block_of_distinct_bytes(gen, periods):
    ids, targets = corpus.repeat_batch(60, 128, gen, periods)
    low, high = periods or (16, 64)
    seen = set()
    for row, target in zip(ids.tolist(), targets.tolist(), strict=False):
        period = next(p for p in range(1, 129) if all(row[t] == row[t - p] for t in range(p, 128)))
        assert low <= period <= high and len(set(row[:period])) == period
        seen.add(period)
        for t in range(128):
            assert target[t] == (row[t + 1] if period <= t + 1 < 128 else IGNORE)
    assert len(seen) > 10
    with pytest.raises(ValueError, match="periods must satisfy"):
        corpus.repeat_batch(2, 64, gen, (8, 300))


@pytest.mark.parametrize("control", [False, True])
def test_passkey_batch_scores_only_the_repeated_key(gen, control):
    text = torch.full((500,), ord("x"))
    ids, targets = corpus.passkey_batch(text, 16, 96, gen, control=control)
    assert ids.shape == targets.shape == (16, 96)
    for row, target in zip(ids.tolist(), targets.tolist(), strict=False):
        line = bytes(row).decode()
        assert line.startswith("pass key: ") and line[-KEY_DIGITS + 1 - 11 : -KEY_DIGITS + 1] == "\npass key: "
        first = line[10:15]
        scored = "".join(chr(t) for t in target if t != IGNORE)
        assert len(scored) == KEY_DIGITS and scored[:-1] == line[-KEY_DIGITS + 1 :]
        assert all(a != b for a, b in zip(first, scored, strict=False)) if control else first == scored
        assert target.index(next(t for t in target if t != IGNORE)) == 96 - KEY_DIGITS


def test_extension_methods_and_the_yarn_ablations():
    cfg = StudyConfig()
    methods = extensions(cfg)
    head_dim = cfg.d_model // cfg.n_heads
    plain, _ = rope_parameters(head_dim, cfg.extension_base)
    ramp, attention = rope_parameters(head_dim, cfg.extension_base, methods["yarn_ramp_only"][0])
    yarn, yarn_attention = rope_parameters(head_dim, cfg.extension_base, methods["yarn"][0])
    torch.testing.assert_close(ramp, yarn, rtol=0, atol=0)  # same frequencies ...
    assert attention == 1.0 and yarn_attention == pytest.approx(0.1 * math.log(4) + 1)  # ... temperature apart
    assert methods["yarn_temperature_only"][:2] == (None, yarn_attention_factor(4.0) ** 2)
    dynamic, _ = rope_parameters(head_dim, cfg.extension_base, methods["dynamic"][0], seq_len=4 * cfg.train_len)
    ntk, _ = rope_parameters(head_dim, cfg.extension_base, methods["ntk"][0])
    torch.testing.assert_close(dynamic, ntk, rtol=1e-12, atol=0)  # factor 1: dynamic at 4L is NTK with factor 4
    assert not torch.equal(ramp, plain)
    turns = cfg.train_len * plain / (2 * math.pi)  # turns of each pair over the training length
    fast, _ = rope_parameters(head_dim, cfg.extension_base, methods["yarn_beta_fast_2"][0])
    slow, _ = rope_parameters(head_dim, cfg.extension_base, methods["yarn_beta_slow_0.1"][0])
    assert torch.equal(fast[turns >= 2], plain[turns >= 2]) and not torch.equal(ramp[turns >= 2], plain[turns >= 2])
    torch.testing.assert_close(slow[turns < 0.1], plain[turns < 0.1] / 4, rtol=1e-12, atol=0)
    assert (slow[(turns >= 0.1) & (turns < 1)] > ramp[(turns >= 0.1) & (turns < 1)]).all()  # interpolated less


def test_measure_skips_a_learned_table_past_its_length():
    cfg = StudyConfig(**load_script().QUICK)
    train, valid = corpus.split(corpus.corpus_bytes())
    torch.manual_seed(0)
    model = TinyLM(cfg.d_model, cfg.n_heads, cfg.n_layers, "learned", cfg.train_len)
    out = measure(model, valid, cfg)
    fits = [n <= cfg.train_len for n in cfg.eval_lengths]
    assert [v is not None for v in out["loss"]] == fits and [v is not None for v in out["entropy"]] == fits
    assert out["loss"][0] == pytest.approx(math.log(256), rel=0.05)  # untrained: about uniform over bytes
    assert len(out["position_loss"]) == cfg.train_len // 16
    assert parse_model("rope-100") == ("rope", 100.0)
    with pytest.raises(ValueError, match="model must be one of"):
        parse_model("xpos")


def check_results(data: dict, cfg: StudyConfig) -> None:
    assert data["config"] == json.loads(json.dumps(asdict(cfg)))  # the shipped numbers come from this config
    assert data["models"] == cfg.models() and data["corpus"]["name"] == "pydoc_data.topics"
    assert len(data["corpus"]["sha256"]) == 64 and set(data["versions"]) >= {"python", "torch"}
    assert {(r["model"], r["seed"]) for r in data["runs"]} == {(m, s) for m in cfg.models() for s in cfg.seeds}
    for run in data["runs"]:
        assert len(run["loss"]) == len(cfg.eval_lengths) and len(run["passkey"]) == len(cfg.probe_lengths)
        for value in run["loss"] + run["copy_fixed"] + run["passkey"]:
            assert value is None or (math.isfinite(value) and value >= 0)
        assert ("extension" in run) == (run["model"] == f"rope-{cfg.extension_base:g}")
        if "extension" in run:
            assert set(run["extension"]) == set(extensions(cfg))


def test_script_quick_run_end_to_end(tmp_path):
    """The reduced version of the script that produced the shipped results, run as a reader would run it; one
    task recomputed in this process gives the same numbers (each task is seeded on its own)."""
    out = tmp_path / "quick.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out), "--no-progress", "--jobs", "2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["generated_by"] == "python3 scripts/extrapolation.py --quick"
    script = load_script()
    cfg = StudyConfig(**script.QUICK)
    check_results(data, cfg)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train, valid = corpus.split(corpus.corpus_bytes(), cfg.valid_fraction)
        again = script._rounded(run_task(cfg, "rope-10000", 1, train, valid))
    finally:
        torch.set_num_threads(threads)
    assert again == next(r for r in data["runs"] if (r["model"], r["seed"]) == ("rope-10000", 1))


def test_shipped_results_match_the_script_defaults():
    data = json.loads(SHIPPED.read_text())
    assert data["generated_by"] == "python3 scripts/extrapolation.py" and data["threads_per_task"] == 1
    check_results(data, StudyConfig())
    assert len(StudyConfig().seeds) >= 3
