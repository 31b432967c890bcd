"""The small training runs of chapter 2: data, the batched trainer against a plain loop, determinism."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_embed import sinusoidal_table
from course_embed.lab import tiny_lm
from course_embed.lab.tiny_lm import Setting


def test_reverse_batch_targets():
    ids, targets = tiny_lm.reverse_batch(4, 6, 10, torch.Generator().manual_seed(1))
    assert torch.equal(targets[:, 0], ids[:, -1]) and torch.equal(targets, ids.flip(1))


SETTINGS = [Setting("scaled_normal", True), Setting("normal", True, tied=False, pre_norm=True)]


def _plain_loop(setting, seed, steps, vocab_size=32, d_model=32, seq=8, batch=16, lr=1e-2):
    """An independent reference: one TinyTransformer, a plain training loop."""
    torch.manual_seed(seed)
    model = tiny_lm.TinyTransformer(vocab_size, d_model, seq, setting)
    gen = torch.Generator().manual_seed(seed)
    q_w, rest_w = model.qkv.weight.detach()[: 2 * d_model], model.qkv.weight.detach()[2 * d_model :]
    q_b, rest_b = model.qkv.bias.detach()[: 2 * d_model], model.qkv.bias.detach()[2 * d_model :]
    qk = [nn.Parameter(q_w.clone()), nn.Parameter(q_b.clone())]
    rest = [nn.Parameter(rest_w.clone()), nn.Parameter(rest_b.clone())]
    others = [p for n, p in model.named_parameters() if not n.startswith("qkv.")]
    opt = torch.optim.Adam(
        [{"params": qk, "lr": lr / setting.qk_lr}, {"params": rest + others}], lr=lr
    )  # an independent route to a per-row learning rate: the query and key rows as parameters of their own

    def run(ids):
        del model.qkv.weight, model.qkv.bias
        model.qkv.weight = torch.cat([qk[0], rest[0]])
        model.qkv.bias = torch.cat([qk[1], rest[1]])
        return model(ids)

    for _ in range(steps):
        ids, targets = tiny_lm.reverse_batch(batch, seq, vocab_size, gen)
        loss = F.cross_entropy(run(ids).flatten(0, 1), targets.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    test_ids, test_targets = tiny_lm.reverse_batch(512, seq, vocab_size, torch.Generator().manual_seed(10_000))
    with torch.no_grad():
        return F.cross_entropy(run(test_ids).flatten(0, 1), test_targets.flatten()).item()


CONTROLS = Setting("scaled_normal", True, tied=False, copy_head=True, score_gain=3.0, tau=2.0)
SMALL_QK = Setting("normal", True, tied=False, qk_init=0.5)
SLOW_QK = Setting("normal", False, tied=False, score_gain=4.0, qk_lr=4.0)
DRAWN = Setting("scaled_normal", True, tied=False, head_like_table=True)


def test_batched_training_equals_separate_runs():
    settings = SETTINGS + [CONTROLS, DRAWN, SMALL_QK, SLOW_QK]
    results = tiny_lm.train_reverse(settings, [0, 1], steps=20, every=10)
    assert [(r.setting, r.seed) for r in results] == [(s, k) for s in settings for k in (0, 1)]
    for r in results:
        assert len(r.losses) == 3
        assert r.losses[-1] == pytest.approx(_plain_loop(r.setting, r.seed, 20), rel=1e-4)


def test_batched_training_is_deterministic_whatever_the_thread_count():
    torch.set_num_threads(2)
    a = tiny_lm.train_reverse(SETTINGS[:1], [3], steps=10, every=10)
    assert torch.get_num_threads() == 2  # restored
    torch.set_num_threads(1)
    b = tiny_lm.train_reverse(SETTINGS[:1], [3], steps=10, every=10)
    torch.set_num_threads(2)
    assert a == b


def test_the_intended_design_learns_the_task_and_nothing_learns_without_training():
    result = tiny_lm.train_reverse([Setting("scaled_normal", False)], [0], steps=150)[0]
    assert result.accuracy > 0.95 and result.losses[-1] < 0.1 < result.losses[0]


def test_train_reverse_bad_input():
    with pytest.raises(ValueError, match="multiple of every"):
        tiny_lm.train_reverse(SETTINGS, [0], steps=10, every=3)
    with pytest.raises(ValueError, match="at least one"):
        tiny_lm.train_reverse([], [0])


RECORD = Path(__file__).resolve().parents[2] / "book" / "02_scaling_runs.json"


def test_pe_scale_multiplies_the_position_table():
    model = tiny_lm.TinyTransformer(32, 32, 8, Setting("normal", True, tied=False, pe_scale=4.0))
    torch.testing.assert_close(model.pe, 4.0 * sinusoidal_table(8, 32))


def test_the_controls_copy_the_table_multiply_the_scores_and_divide_the_logits():
    torch.manual_seed(0)
    model = tiny_lm.TinyTransformer(32, 32, 8, CONTROLS)
    torch.testing.assert_close(model.head.weight, model.embed.weight, rtol=0, atol=0)
    ids = torch.randint(0, 32, (4, 8))
    plain = tiny_lm.TinyTransformer(32, 32, 8, Setting("scaled_normal", True, tied=False))
    plain.load_state_dict(model.state_dict())
    h = plain.embed(ids) + plain.pe
    q, k, v = plain.qkv(h).chunk(3, dim=-1)
    weights = (q @ k.mT * 3.0 / 32**0.5).softmax(-1)  # scores x score_gain
    x = plain.norm(h + plain.out(weights @ v))
    torch.testing.assert_close(model(ids), x @ plain.head.weight.T / 2.0)  # logits / tau
    with pytest.raises(ValueError, match="copy_head=True needs tied=False"):
        Setting("normal", True, copy_head=True)
    with pytest.raises(ValueError, match="must be positive"):
        Setting("normal", True, tau=0.0)
    with pytest.raises(ValueError, match="must be positive"):
        Setting("normal", True, qk_init=-1.0)
    with pytest.raises(ValueError, match="must be positive"):
        Setting("normal", True, qk_lr=0.0)


def test_qk_init_shrinks_only_the_query_and_key_rows_at_init():
    torch.manual_seed(0)
    plain = tiny_lm.TinyTransformer(32, 32, 8, Setting("normal", True, tied=False))
    torch.manual_seed(0)
    small = tiny_lm.TinyTransformer(32, 32, 8, Setting("normal", True, tied=False, qk_init=0.25))
    torch.testing.assert_close(small.qkv.weight[:64], 0.25 * plain.qkv.weight[:64], rtol=0, atol=0)
    torch.testing.assert_close(small.qkv.bias[:64], 0.25 * plain.qkv.bias[:64], rtol=0, atol=0)
    torch.testing.assert_close(small.qkv.weight[64:], plain.qkv.weight[64:], rtol=0, atol=0)
    torch.testing.assert_close(small.embed.weight, plain.embed.weight, rtol=0, atol=0)


def test_the_head_like_table_is_a_new_draw_of_the_tables_init():
    torch.manual_seed(0)
    model = tiny_lm.TinyTransformer(32, 512, 8, Setting("scaled_normal", True, tied=False, head_like_table=True))
    head, table = model.head.weight.detach(), model.embed.weight.detach()
    assert head.std().item() == pytest.approx(512**-0.5, rel=0.02)  # the table's N(0, 1/d), not nn.Linear's
    assert abs(F.cosine_similarity(head.flatten(), table.flatten(), dim=0).item()) < 0.02  # independent of it
    with pytest.raises(ValueError, match="head_like_table=True needs tied=False"):
        Setting("normal", True, head_like_table=True)
    with pytest.raises(ValueError, match="pick one"):
        Setting("normal", True, tied=False, copy_head=True, head_like_table=True)


def test_summarise_and_the_record_round_trip(tmp_path):
    runs = tiny_lm.train_reverse(SETTINGS, [0, 1], steps=10, every=10)
    summary = tiny_lm.summarise(runs)
    first = [r.accuracy for r in runs[:2]]
    assert summary[SETTINGS[0]].mean == pytest.approx(sum(first) / 2)
    assert (summary[SETTINGS[0]].min, summary[SETTINGS[0]].max) == (min(first), max(first))
    tiny_lm.write_record(tmp_path / "r.json", {"g": (10, 1e-2, runs)})
    group = tiny_lm.read_record(tmp_path / "r.json")["g"]
    assert list(group.summaries) == SETTINGS and group.seeds == (0, 1)
    tiny_lm.check_record(group, runs)
    got = group.summaries[SETTINGS[0]]
    assert got.accuracies == tuple(round(a, 4) for a in first) and len(got.curves) == 2
    assert got.curves[0] == tuple(round(v, 4) for v in runs[0].losses)
    assert got.sd == pytest.approx(abs(first[0] - first[1]) / 2**0.5, abs=1e-4)
    moved = {s: tiny_lm.Summary(v.mean + 0.2, v.mean, v.mean, v.loss0) for s, v in group.summaries.items()}
    with pytest.raises(ValueError, match="re-run gives accuracy"):
        tiny_lm.check_record(tiny_lm.Group(10, 1e-2, (0, 1), moved), runs)
    with pytest.raises(ValueError, match="cover exactly the recorded settings"):
        tiny_lm.check_record(group, runs[:2])


def test_the_tolerance_is_at_least_half_the_seed_range():
    assert tiny_lm.Summary(0.5, 0.49, 0.51, 1.0).tolerance() == 0.05
    assert tiny_lm.Summary(0.6, 0.2, 0.9, 1.0).tolerance() == pytest.approx(0.35)


def test_chapter_2s_recorded_runs_reproduce_within_their_tolerance():
    """The accuracies chapter 2 prints come from this record; whatever kernels this CPU picks, a re-run agrees."""
    for group in tiny_lm.read_record(RECORD).values():
        tiny_lm.check_record(group, group.rerun())
