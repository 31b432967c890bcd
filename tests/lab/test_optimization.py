"""Chapters 6 and 7 measurements: precision costs, the anti-patterns, and the figures."""

import math

import matplotlib
import pytest
import torch

from course_embed.lab import bench, fusion, optimization

matplotlib.use("Agg")


def test_relative_error_against_hand_computed_values():
    exact = torch.tensor([3.0, -4.0])  # rms = sqrt(12.5)
    approx = torch.tensor([3.0, -3.0])
    err = optimization.relative_error(approx, exact)
    assert math.isclose(err["rms"], math.sqrt(0.5) / math.sqrt(12.5), rel_tol=1e-12)
    assert math.isclose(err["max"], 1 / math.sqrt(12.5), rel_tol=1e-12)
    with pytest.raises(ValueError, match="same shape"):
        optimization.relative_error(approx, exact[:1])


def test_bfloat16_rounding_is_within_half_an_ulp(gen):
    w = torch.randn(1000, 64, generator=gen)
    rel = ((w.bfloat16().double() - w.double()).abs() / w.double().abs()).max().item()
    assert rel <= 2.0**-8  # 8 significant bits, round to nearest: half of the spacing 2**-7 relative to 1
    err = optimization.relative_error(w.bfloat16(), w)
    assert 2.0**-12 < err["rms"] < 2.0**-8


def test_lost_updates_follow_the_spacing_of_the_dtype():
    # bfloat16 spacing: 2**-7 * 2**e for |w| in [2**e, 2**(e+1)); a step is lost when below half of it
    w = torch.tensor([0.75, 0.0625, 0.01, 0.001])
    # spacings: 2**-8, 2**-11, 2**-14, 2**-17; half: 1.95e-3, 2.4e-4, 3.1e-5, 3.8e-6
    assert optimization.lost_update_fraction(w, 1e-4, torch.bfloat16) == 0.5  # lost on 0.75 and 0.0625
    assert optimization.lost_update_fraction(w, 1e-2, torch.bfloat16) == 0.0
    assert optimization.lost_update_fraction(w, 1e-4, torch.float32) == 0.0


def test_dict_cache_is_correct_until_the_table_changes(gen):
    emb = torch.nn.Embedding(50, 8)
    cached = optimization.DictCacheEmbedding(emb)
    ids = torch.randint(0, 50, (3, 7), generator=gen)
    assert fusion.max_abs_difference(cached(ids), emb(ids)) == 0.0
    assert len(cached.cache) == len(set(ids.flatten().tolist()))
    opt = torch.optim.SGD(emb.parameters(), lr=0.5)
    emb(ids).square().sum().backward()
    opt.step()
    assert fusion.max_abs_difference(cached(ids), emb(ids)) > 0.1  # stale copies


def test_checkpointing_a_lookup_saves_nothing_and_reentrant_drops_the_gradient(gen):
    emb = torch.nn.Embedding(100, 16)
    ids = torch.randint(0, 100, (4, 8), generator=gen)
    report = optimization.checkpoint_report(emb, ids)
    assert report["output_bytes"] == 4 * 8 * 16 * 4
    assert report["saved_bytes"] == ids.numel() * ids.element_size()
    for mode in ("default", "reentrant"):
        assert report[mode]["requires_grad"] is False and report[mode]["weight_grad"] is False
        assert any("Gradients will be None" in w for w in report[mode]["warnings"])
    assert report["non-reentrant"] == {"requires_grad": True, "weight_grad": True, "warnings": []}
    assert emb.weight.grad is None  # the report leaves no gradient behind


def test_cpu_autocast_leaves_the_embedding_in_float32():
    assert optimization.autocast_dtypes("cpu") == {"embedding": torch.float32, "linear": torch.bfloat16}


def test_embedding_bag_pools(gen):
    w = torch.randn(30, 5, generator=gen, dtype=torch.float64)
    ids = torch.randint(0, 30, (2, 6), generator=gen)
    report = optimization.embedding_bag_report(w, ids)
    assert report["bag_shape"] == (2, 5) and report["lookup_shape"] == (2, 6, 5)
    assert report["max_diff_to_mean"] < 1e-14


def table(name_seconds, baseline="textbook"):
    rows = tuple(bench.Row(n, s, (s,), 1000) for n, s in name_seconds)
    return bench.BenchTable("shape", rows, baseline, "2 threads", "cpu")


#: a baseline, its identical twin, one variant and the copy, timed in three rounds
SPEEDUP_ROWS = (
    bench.Row("textbook", 4e-3, (4e-3, 4e-3, 4e-3), 1000),
    bench.Row("textbook'", 4e-3, (4e-3, 5e-3, 2e-3), 1000),
    bench.Row("package", 1e-3, (1e-3, 1e-3, 2e-3), 1000),
    bench.Row("copy", 5e-4, (5e-4,) * 3, 1000),
)


def test_speedup_plot_leaves_out_a_variant_missing_from_one_table():
    full = bench.BenchTable("shape", SPEEDUP_ROWS, "textbook", "1 threads", "cpu")
    cut = bench.BenchTable("shape", SPEEDUP_ROWS[:2] + SPEEDUP_ROWS[3:], "textbook", "1 threads", "cpu")
    ax = optimization.speedup_plot([cut, full]).axes[0]
    bars = next(c for c in ax.containers if c.get_label() == "package")
    assert list(bars.lines[0].get_xdata()) == [1.0]  # only the second group has the variant


def test_speedup_plot_shows_each_variant_with_its_interval_the_noise_floor_and_the_copy():
    t = bench.BenchTable("shape", SPEEDUP_ROWS, "textbook", "1 threads", "cpu")
    fig = optimization.speedup_plot([t, t])
    ax = fig.axes[0]
    bars = next(c for c in ax.containers if c.get_label() == "package")
    assert list(bars.lines[0].get_ydata()) == [4.0, 4.0]  # the median of the ratios 4, 4, 2
    segments = bars.lines[2][0].get_segments()
    assert [tuple(seg[:, 1]) for seg in segments] == [(2.0, 4.0), (2.0, 4.0)]  # the range of 3 rounds
    band = next(c for c in ax.collections if c.get_label() == "noise floor")
    assert band.get_paths()[0].vertices[:, 1].min() == pytest.approx(0.8)  # 4 / 5: the floor's low end
    copy_lines = [c for c in ax.collections if c.get_label() == "copy of the layer's bytes"]
    assert len(copy_lines) == 1 and ax.get_yscale() == "log"
    assert ax.get_ylabel() == "speed-up over textbook (log)"


# --- lazy against dense Adam ----------------------------------------------------------------------------------

BATCHES = [torch.tensor([0, 1, 1]), torch.tensor([2, 3]), torch.tensor([0, 4]), torch.tensor([4])]


def run_optimizer(make, sparse, weight, coef):
    """Steps of ``make`` on a (6, 3) table, loss ``sum(coef[i] * table[ids[i]])`` for each batch of BATCHES."""
    table = torch.nn.Embedding(6, 3, sparse=sparse)
    with torch.no_grad():
        table.weight.copy_(weight)
    optimizer = make(table.parameters())
    for ids in BATCHES:
        optimizer.zero_grad()
        (table(ids) * coef[: len(ids)]).sum().backward()
        optimizer.step()
    return table.weight.detach()


def reference_adam(weight, coef, lazy, lr=0.1, b1=0.9, b2=0.999, eps=1e-8):
    """Adam (Kingma and Ba, algorithm 1) in float64; ``lazy``: moments and weights change only in the batch's rows,
    bias-corrected with the global step count (PyTorch's SparseAdam, eps added to sqrt(v) before the correction)."""
    w = weight.double().clone()
    m, v = torch.zeros_like(w), torch.zeros_like(w)
    for t, ids in enumerate(BATCHES, start=1):
        g = torch.zeros_like(w).index_add_(0, ids, coef[: len(ids)].double())
        rows = ids.unique() if lazy else torch.arange(len(w))
        m[rows] = b1 * m[rows] + (1 - b1) * g[rows]
        v[rows] = b2 * v[rows] + (1 - b2) * g[rows] ** 2
        c1, c2 = 1 - b1**t, 1 - b2**t
        if lazy:
            w[rows] -= lr * math.sqrt(c2) / c1 * m[rows] / (v[rows].sqrt() + eps)
        else:
            w -= lr / c1 * m / (v.sqrt() / math.sqrt(c2) + eps)
    return w


def test_sparse_adam_is_lazy_adam_and_adam_is_dense_adam(gen):
    weight, coef = torch.randn(6, 3, generator=gen), torch.randn(3, 3, generator=gen)
    lazy = run_optimizer(lambda p: torch.optim.SparseAdam(p, lr=0.1), True, weight, coef)
    dense = run_optimizer(lambda p: torch.optim.Adam(p, lr=0.1, fused=True), False, weight, coef)
    lazy_ref, dense_ref = reference_adam(weight, coef, lazy=True), reference_adam(weight, coef, lazy=False)
    torch.testing.assert_close(lazy.double(), lazy_ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(dense.double(), dense_ref, rtol=1e-6, atol=1e-6)
    assert torch.equal(lazy[5], weight[5])  # never in a batch
    assert (lazy_ref - dense_ref)[:4].abs().max() > 0.01  # the two rules differ on rows that left the batch


def zipf_stream(n, vocab, generator):
    """``n`` ids with P(k) proportional to 1 / (k + 1): a Zipf-like stream."""
    return torch.multinomial(1 / torch.arange(1.0, vocab + 1), n, replacement=True, generator=generator)


def float64_losses(params, ids, targets):
    """An independent float64 recomputation of :func:`optimization.bigram_losses`."""
    p = {k: v.double() for k, v in params.items()}
    logits = torch.tanh(p["table"][ids] @ p["mix"]) @ p["head"].T + p["bias"]
    return logits.logsumexp(-1) - logits.gather(1, targets[:, None])[:, 0]


def test_lazy_adam_study_keeps_absent_rows_and_reports_its_own_losses(gen):
    v, steps, batch, d = 300, 25, 16, 8
    train, valid = zipf_stream(4000, v, gen), zipf_stream(600, v, gen)
    runs = optimization.lazy_adam_study(
        train, valid, v, seeds=(0, 3), steps=steps, batch=batch, d_model=d, edges=(5, 50)
    )
    assert [(r.optimizer, r.seed) for r in runs] == [("Adam", 0), ("SparseAdam", 0), ("Adam", 3), ("SparseAdam", 3)]
    counts = torch.bincount(train, minlength=v)
    band = torch.where(counts < 5, 0, torch.where(counts < 50, 1, 2))[valid[:-1]]
    for run in runs:
        g = torch.Generator().manual_seed(run.seed)  # the documented protocol: init, then the batch positions
        init = optimization.bigram_init(v, d, g)
        positions = torch.randint(0, len(train) - 1, (steps, batch), generator=g)
        present = [set(train[p].tolist()) for p in positions]
        assert run.rows_in_batch == tuple(len(s) for s in present)
        seen = set().union(*present)
        never = sorted(set(range(v)) - seen)
        assert len(never) > 50 and torch.equal(run.params["table"][never], init["table"][never])  # bit for bit
        if run.optimizer == "SparseAdam":
            assert run.rows_moved == run.rows_in_batch  # exactly the batch's rows move
        else:  # every row seen so far keeps moving on its momentum
            so_far = [len(set().union(*present[: t + 1])) for t in range(steps)]
            assert run.rows_moved == tuple(so_far) and so_far[-1] > 2 * max(run.rows_in_batch)
        first = float64_losses(init, train[positions[0]], train[positions[0] + 1]).mean().item()
        assert math.isclose(run.train_losses[0], first, rel_tol=1e-5) and len(run.train_losses) == steps
        held = float64_losses(run.params, valid[:-1], valid[1:])
        assert math.isclose(run.held_out, held.mean().item(), rel_tol=1e-5)
        expected = {name: held[band == k].mean().item() for k, name in enumerate(["0-4", "5-49", "50+"])}
        assert run.bands.keys() == expected.keys()
        for name in expected:
            assert math.isclose(run.bands[name], expected[name], rel_tol=1e-5)
    again = optimization.lazy_adam_study(train, valid, v, seeds=(3,), steps=steps, batch=batch, d_model=d)
    assert again[1].train_losses == runs[3].train_losses  # deterministic
    assert torch.equal(again[1].params["table"], runs[3].params["table"])


def test_lazy_adam_study_bands_by_the_drawn_batches_and_pairs_a_control(gen):
    v, steps, batch, d = 200, 10, 8, 8
    train, valid = zipf_stream(3000, v, gen), zipf_stream(400, v, gen)
    runs = optimization.lazy_adam_study(
        train, valid, v, seeds=(1,), steps=steps, batch=batch, d_model=d, edges=(1, 5), band_by="batches", control=True
    )
    assert [r.optimizer for r in runs] == ["Adam", "SparseAdam", "Adam, other batches"]
    g = torch.Generator().manual_seed(1)
    init = optimization.bigram_init(v, d, g)
    positions = torch.randint(0, len(train) - 1, (steps, batch), generator=g)
    seen = torch.bincount(train[positions].flatten(), minlength=v)[valid[:-1]]
    band = torch.where(seen < 1, 0, torch.where(seen < 5, 1, 2))
    held = float64_losses(runs[1].params, valid[:-1], valid[1:])
    for k, name in enumerate(["0-0", "1-4", "5+"]):
        assert math.isclose(runs[1].bands[name], held[band == k].mean().item(), rel_tol=1e-5)
    other = torch.randint(0, len(train) - 1, (steps, batch), generator=torch.Generator().manual_seed(10_001))
    assert runs[2].rows_in_batch == tuple(train[p].unique().numel() for p in other)  # its own batches
    first = float64_losses(init, train[other[0]], train[other[0] + 1]).mean().item()
    assert math.isclose(runs[2].train_losses[0], first, rel_tol=1e-5)  # the same init
    with pytest.raises(ValueError, match="band_by must be 'training' or 'batches'"):
        optimization.lazy_adam_study(train, valid, v, steps=1, band_by="seen")


def test_lazy_adam_study_rejects_bad_arguments(gen):
    train, valid = zipf_stream(100, 20, gen), zipf_stream(30, 20, gen)
    bad = [
        ({"seeds": ()}, "seeds must name at least one"),
        ({"steps": 0}, "steps must be a positive integer, got 0"),
        ({"lr": -1.0}, "lr must be positive, got -1.0"),
        ({"edges": (100, 10)}, r"edges must be increasing .* got \(100, 10\)"),
        ({"vocab_size": 10}, r"train ids must lie in \[0, vocab_size=10\)"),
        ({"train": train.float()}, "train must be int64 ids"),
    ]
    for change, message in bad:
        kwargs = {"train": train, "valid": valid, "vocab_size": 20, "steps": 2} | change
        with pytest.raises(ValueError, match=message):
            optimization.lazy_adam_study(**kwargs)


def test_frequency_bands_split_counts_at_the_edges():
    band, names = optimization.frequency_bands(torch.tensor([0, 9, 10, 99, 100, 5000]), (10, 100, 1000))
    assert band.tolist() == [0, 0, 1, 1, 2, 3] and names == ["0-9", "10-99", "100-999", "1000+"]


def test_word_stream_numbers_words_by_training_count():
    train, valid, vocab = optimization.word_stream(min_count=3)
    assert vocab[0] == "<unk>" and len(set(vocab)) == len(vocab) > 1000
    assert abs(len(valid) / (len(train) + len(valid)) - 0.1) < 1e-3
    counts = torch.bincount(train, minlength=len(vocab))
    assert (counts[1:] >= 3).all() and (counts[1:-1] >= counts[2:]).all()  # decreasing after <unk>
    assert valid.max() < len(vocab) and counts[0] > 0  # rare words share id 0
    with pytest.raises(ValueError, match="min_count must be a positive integer, got 0"):
        optimization.word_stream(min_count=0)


def test_lazy_adam_study_first_step_is_each_rule_with_the_same_hyper_parameters(gen):
    v, batch, d, lr = 300, 16, 8, 0.03
    train = zipf_stream(4000, v, gen)
    dense, lazy = optimization.lazy_adam_study(train, train[:50], v, seeds=(5,), steps=1, batch=batch, d_model=d, lr=lr)
    g = torch.Generator().manual_seed(5)
    init = {k: t.double().requires_grad_() for k, t in optimization.bigram_init(v, d, g).items()}
    pos = torch.randint(0, len(train) - 1, (1, batch), generator=g)[0]
    float64_losses(init, train[pos], train[pos + 1]).mean().backward()
    c1, c2 = 1 - 0.9, 1 - 0.999  # bias corrections at step 1
    for name, p in init.items():
        m, s = (1 - 0.9) * p.grad, ((1 - 0.999) * p.grad**2).sqrt()
        adam = p.detach() - lr / c1 * m / (s / math.sqrt(c2) + 1e-8)  # torch.optim.Adam
        torch.testing.assert_close(dense.params[name].double(), adam, rtol=1e-5, atol=1e-6)
        expected = adam  # the other parameters use the same Adam in both runs
        if name == "table":  # SparseAdam: eps before the bias correction, and only the batch's rows
            rows = train[pos].unique()
            expected = p.detach().clone()
            expected[rows] -= (lr * math.sqrt(c2) / c1 * m / (s + 1e-8))[rows]
        torch.testing.assert_close(lazy.params[name].double(), expected, rtol=1e-5, atol=1e-6)
