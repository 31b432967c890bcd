"""Chapter 6 measurements: precision costs, the anti-patterns, and the figures."""

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


def test_speedup_plot_shows_each_variant_with_its_interval_and_the_copy():
    rows = (
        bench.Row("textbook", 4e-3, (4e-3, 4e-3, 4e-3), 1000),
        bench.Row("package", 1e-3, (1e-3, 1e-3, 2e-3), 1000),
        bench.Row("copy", 5e-4, (5e-4,) * 3, 1000),
    )
    t = bench.BenchTable("shape", rows, "textbook", "1 threads", "cpu")
    fig = optimization.speedup_plot([t, t])
    ax = fig.axes[0]
    assert sorted(text.get_text() for text in ax.texts) == ["4.00x", "4.00x"]  # median of 4, 4, 2
    assert [p.get_height() for p in ax.patches] == [4.0, 4.0]
    copy_lines = [c for c in ax.collections if c.get_label() == "same-size copy"]
    assert len(copy_lines) == 1 and ax.get_ylabel() == "speed-up over textbook"
    bars = next(c for c in ax.containers if hasattr(c, "errorbar"))
    error_bars = bars.errorbar.lines[2][0].get_segments()
    assert [tuple(seg[:, 1]) for seg in error_bars] == [(2.0, 4.0), (2.0, 4.0)]  # bootstrap of (4, 4, 2)
