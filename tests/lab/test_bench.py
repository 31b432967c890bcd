"""The timing harness: byte formulas, the table's arithmetic, CUDA-event timing logic. No wall-clock assertions."""

import math
import statistics

import pytest
import torch
import torch.nn.functional as F

from course_embed.lab import bench


def test_byte_formulas_count_each_tensor_once():
    b, s, d = 32, 128, 512
    out = torch.empty(b, s, d)
    rows = torch.empty(b * s, d)  # gathered table rows
    pe = torch.empty(s, d)
    assert bench.embedding_bytes(b, s, d, 4) == sum(t.numel() * 4 for t in (out, rows, pe))
    assert bench.embedding_bytes(b, s, d, 2) * 2 == bench.embedding_bytes(b, s, d, 4)
    assert bench.gather_bytes(b, s, d, 4) == sum(t.numel() * 4 for t in (out, rows))
    q = torch.empty(8, 12, 1024, 64)
    cos = sin = torch.empty(1024, 64)
    assert bench.rope_bytes(8, 12, 1024, 64, 4) == 4 * (2 * q.numel() + cos.numel() + sin.numel())


def test_traffic_counts_passes_over_the_output():
    traffic = bench.embedding_traffic(32, 128, 512, 4)
    n, pe = 32 * 128 * 512 * 4, 128 * 512 * 4
    assert traffic["minimum"] == bench.embedding_bytes(32, 128, 512, 4) == 2 * n + pe
    assert traffic["fused eager"] - traffic["minimum"] == 2 * n  # one more read and write of the output
    assert traffic["textbook"] - traffic["minimum"] == 4 * n  # two more


def test_tensor_bytes_dense_and_sparse():
    assert bench.tensor_bytes(torch.empty(10, 3, dtype=torch.float16)) == 60
    emb = torch.nn.Embedding(1000, 8, sparse=True)
    ids = torch.tensor([[1, 2, 2, 7]])
    emb(ids).sum().backward()
    grad = emb.weight.grad
    assert grad.layout == torch.sparse_coo and not grad.is_coalesced()
    # one stored row per looked-up id, repeats included: int64 indices (1 x 4) + float32 values (4 x 8)
    assert bench.tensor_bytes(grad) == 4 * 8 + 4 * 8 * 4
    assert bench.tensor_bytes(grad.coalesce()) == 3 * 8 + 3 * 8 * 4
    assert bench.tensor_bytes(grad.to_dense()) == 1000 * 8 * 4


def test_saved_tensor_bytes_of_a_lookup_is_the_ids():
    weight = torch.randn(500, 64, requires_grad=True)
    ids = torch.randint(0, 500, (4, 16))
    assert bench.saved_tensor_bytes(lambda: F.embedding(ids, weight)) == ids.numel() * 8
    x = torch.randn(4, 16, 64, requires_grad=True)
    # tanh saves its output: one (4, 16, 64) float32 tensor
    assert bench.saved_tensor_bytes(lambda: torch.tanh(x)) == x.numel() * 4


class FakeEvent:
    """Stands in for torch.cuda.Event: a clock that advances 2 ms per call of the timed function."""

    clock = [0.0]

    def __init__(self):
        self.t = None
        self.synced = False

    def record(self):
        self.t = FakeEvent.clock[0]

    def synchronize(self):
        self.synced = True

    def elapsed_time(self, other):
        assert other.synced, "elapsed_time read before the end event completed"
        return (other.t - self.t) * 1e3  # milliseconds, as CUDA events report


def test_time_cuda_divides_event_time_by_the_number_of_calls():
    calls = []

    def fn():
        calls.append(1)
        FakeEvent.clock[0] += 0.002

    synced = []
    seconds = bench.time_cuda(fn, 5, event_factory=FakeEvent, synchronize=lambda: synced.append(1))
    assert len(calls) == 5 and synced
    assert math.isclose(seconds, 0.002, rel_tol=1e-9)


@pytest.mark.cuda
def test_time_cuda_on_a_gpu():
    x = torch.randn(1 << 20, device="cuda")
    assert bench.time_cuda(lambda: x.mul(2.0), 3) > 0


def table(seconds: dict[str, float], nbytes=1000) -> bench.BenchTable:
    rows = tuple(bench.Row(n, s, (s, s), nbytes) for n, s in seconds.items())
    return bench.BenchTable("demo", rows, "textbook", "2 threads", "cpu")


def test_table_ratios_and_format():
    t = table({"textbook": 4e-3, "fused": 1e-3, "copy": 5e-4})
    assert t.speedup("fused") == 4.0 and t.speedup("textbook") == 1.0
    assert t.of_copy("fused") == 0.5
    assert math.isclose(t.row("fused").gbps, 1000 / 1e-3 / 1e9)
    text = t.format()
    assert "fused" in text and "4.00x" in text and "50%" in text and "1 ms" in text and "500 us" in text
    with pytest.raises(KeyError, match="no variant 'nope'"):
        t.row("nope")


def test_of_copy_compares_rates_when_a_variant_moves_fewer_bytes():
    # a gather moving 600 bytes in the copy's time (the copy moves the layer's 1000 bytes) runs at 60% of the copy's
    # rate, not at 100%; the ratio of times alone would say it matched a copy of bytes it never moves
    rows = (
        bench.Row("textbook", 4e-3, (4e-3, 4e-3), 1000),
        bench.Row("gather", 5e-4, (5e-4, 5e-4), 600),
        bench.Row("copy", 5e-4, (5e-4, 5e-4), 1000),
    )
    t = bench.BenchTable("demo", rows, "textbook", "2 threads", "cpu")
    assert math.isclose(t.of_copy("gather"), 0.6)
    assert math.isclose(t.of_copy("textbook"), 5e-4 / 4e-3)
    assert " 60%" in next(line for line in t.format().splitlines() if line.startswith("gather"))


def test_compare_times_every_variant_and_the_copy(device):
    x = torch.randn(256, 64, device=device)
    result = bench.compare(
        {"slow": lambda: (x * 2.0) + 1.0, "fast": lambda: torch.add(x, x)},
        bench.embedding_bytes(4, 64, 64, 4),
        baseline="slow",
        device=device,
        rounds=3,
        block_seconds=1e-3,
        title="demo",
    )
    assert [r.name for r in result.rows] == ["slow", "slow'", "fast", "copy"]
    for r in result.rows:
        assert len(r.rounds) == 3 and r.seconds == sorted(r.rounds)[1] and r.seconds > 0
    assert result.speedup("slow") == 1.0
    text = result.format()
    assert text.startswith("demo  [") and "range of 3 rounds" in text
    assert text.splitlines()[-1].startswith("noise floor (slow / slow', 1 by construction): [")


def test_compare_shuffles_the_order_of_every_round(monkeypatch):
    calls = []

    def one_call(fn, number, threads):  # stands in for the CPU timer: one call, one second
        fn()
        return 1.0

    monkeypatch.setattr(bench, "time_cpu", one_call)
    variants = {name: (lambda name=name: calls.append(name)) for name in "abcd"}
    bench.compare(variants, None, baseline="a", rounds=12, block_seconds=1e-9, noise_floor=False)
    timed = calls[4 * 4 :]  # after the warm-up call and the 3 calibration calls of each variant
    rounds = [tuple(timed[k : k + 4]) for k in range(0, len(timed), 4)]
    assert len(rounds) == 12 and all(sorted(r) == list("abcd") for r in rounds)  # each variant once per round
    assert len(set(rounds)) > 1  # not the same order every round
    assert len({r[0] for r in rounds}) > 1  # and not always the same variant first


def test_the_noise_floor_twin_runs_blocks_of_the_baseline_size(monkeypatch):
    sizes, clock = {}, iter(range(1, 10**6))

    def timer(fn, number, threads):  # every call looks slower than the last: calibrations differ
        sizes.setdefault(fn, set()).add(number)
        return next(clock) * 1e-3

    monkeypatch.setattr(bench, "time_cpu", timer)
    base, other = (lambda: None), (lambda: None)
    bench.compare({"a": base, "b": other}, None, baseline="a", rounds=3, block_seconds=0.05)
    blocks = {fn: max(n) for fn, n in sizes.items()}  # the block size (single calls during calibration aside)
    assert blocks[base] > 1 and {n for n in sizes[base] if n > 1} == {blocks[base]}  # one size for a and a'


def test_fixed_calls_give_every_variant_blocks_of_that_many_calls(monkeypatch):
    sizes = []
    monkeypatch.setattr(bench, "time_cpu", lambda fn, number, threads: sizes.append(number) or 1e-3)
    bench.compare({"a": lambda: None, "b": lambda: None}, None, baseline="a", rounds=3, calls=7)
    assert set(sizes) == {7}  # no single-call calibration, and the same block on every rank of a group
    with pytest.raises(ValueError, match="calls must be a positive number"):
        bench.compare({"a": lambda: None}, None, baseline="a", calls=0)


def test_compare_times_without_nan_filling_and_restores_it():
    seen = []
    flag = torch.utils.deterministic.fill_uninitialized_memory
    bench.compare(
        {"a": lambda: seen.append(torch.utils.deterministic.fill_uninitialized_memory)},
        8,
        baseline="a",
        rounds=1,
        block_seconds=1e-4,
    )
    assert seen and not any(seen)
    assert torch.utils.deterministic.fill_uninitialized_memory == flag


def test_make_copy_moves_the_requested_bytes():
    copy = bench.make_copy(4000, "cpu")
    out = copy()
    assert out.numel() * 4 * 2 == 4000 and torch.all(out == 1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(baseline="nope"), "baseline='nope' is not one of the variants"),
        (dict(baseline="copy", variants={"copy": lambda: None}), "reserved"),
        (dict(baseline="a", rounds=0), "rounds and threads must be >= 1"),
        (dict(baseline="a", block_seconds=0), "block_seconds must be > 0"),
    ],
)
def test_compare_rejects_bad_arguments(kwargs, match):
    args = dict(variants={"a": lambda: None}, nbytes=8) | kwargs
    with pytest.raises(ValueError, match=match):
        bench.compare(**args)


def binomial_coverage(n: int, j: int) -> float:
    """P(x_(j) <= median < x_(n+1-j)) for n samples of a continuous distribution: 1 - 2 P(Binomial(n, 1/2) < j)."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(j)) / 2**n


@pytest.mark.parametrize("n", range(1, 42))
def test_median_interval_ranks_are_the_narrowest_with_95_percent_coverage(n):
    j, k = bench.median_interval_ranks(n)
    assert k == n + 1 - j and 1 <= j <= k
    if j > 1 or binomial_coverage(n, 1) >= 0.95:
        assert binomial_coverage(n, j) >= 0.95
    if j + 1 <= (n + 1) // 2:
        assert binomial_coverage(n, j + 1) < 0.95  # one rank further in would cover less
    assert (j > 1) == (n >= 9)  # from 9 rounds on the interval is narrower than the range
    with pytest.raises(ValueError, match="n must be >= 1"):
        bench.median_interval_ranks(0)


def test_median_interval_covers_the_median_as_promised():
    torch.manual_seed(0)
    samples = torch.distributions.LogNormal(0.0, 0.5).sample((4000, 15))  # true median exp(0) = 1
    j, k = bench.median_interval_ranks(15)
    ordered = samples.sort(dim=1).values
    covered = ((ordered[:, j - 1] <= 1.0) & (ordered[:, k - 1] >= 1.0)).double().mean().item()
    assert (j, k) == (4, 12) and abs(covered - binomial_coverage(15, 4)) < 0.015


def test_ratio_ci_is_the_order_statistic_interval_of_the_paired_ratios():
    rows = (
        bench.Row("a", 2.0, (2.0,) * 5, 1),
        bench.Row("b", 1.0, (1.0,) * 5, 1),
        bench.Row("c", 1.0, (1.0, 0.5, 2.0, 1.0, 1.0), 1),
    )
    t = bench.BenchTable("t", rows, "a", "", "cpu")
    assert t.ratio_ci("a", "b") == (2.0, 2.0, 2.0)  # no spread, no interval
    assert t.ratio_ci("a", "c") == (2.0, 1.0, 4.0)  # ratios 2, 4, 1, 2, 2: five rounds give their range
    assert t.interval_label == "range of 5 rounds" and t.noise_floor() is None
    ratios = [1.0 + 0.1 * k for k in (3, 14, 0, 7, 9, 1, 12, 5, 2, 10, 4, 13, 6, 11, 8)]  # 15 rounds, shuffled
    rows15 = (bench.Row("a", 1.7, tuple(ratios), 1), bench.Row("a'", 1.0, (1.0,) * 15, 1))
    t15 = bench.BenchTable("t", rows15, "a", "", "cpu")
    mid, low, high = t15.ratio_ci("a", "a'")
    assert (mid, low, high) == pytest.approx((1.7, 1.3, 2.1))  # the median, the 4th and the 12th of 15
    assert t15.interval_label == "95% CI" and t15.noise_floor() == pytest.approx((1.3, 2.1))


def test_spread_is_the_interquartile_range_over_the_median():
    row = bench.Row("r", 2.0, (1.0, 2.0, 2.0, 3.0, 5.0), 1)
    q = statistics.quantiles(row.rounds, n=4)
    assert row.spread == (q[2] - q[0]) / 2.0
    assert bench.Row("one", 1.0, (1.0,), 1).spread == 0.0


def test_variant_bytes_set_each_rows_own_bandwidth():
    result = bench.compare(
        {"a": lambda: None, "b": lambda: None},
        1000,
        baseline="a",
        rounds=1,
        block_seconds=1e-4,
        variant_bytes={"b": 500},
    )
    assert [r.nbytes for r in result.rows] == [1000, 1000, 500, 1000]


def test_keep_freed_memory_sets_glibc_options():
    if not bench.keep_freed_memory():
        pytest.skip("not glibc")
    from course_embed.lab.profile_step import PeakMemory

    info = PeakMemory()._info  # glibc's mallinfo2
    mapped = info().hblkhd
    big = torch.ones(1 << 23)  # 32 MiB: above glibc's mmap threshold, so it would be mmapped by default
    assert info().hblkhd == mapped  # no new mmapped block: it came from the heap, which keeps it when freed
    del big


def test_compare_without_bytes_has_no_copy_and_no_bandwidth_columns():
    result = bench.compare({"a": lambda: None, "b": lambda: None}, None, baseline="a", rounds=9, block_seconds=1e-4)
    assert [r.name for r in result.rows] == ["a", "a'", "b"] and not result.has_copy
    header = result.format().splitlines()[1]
    assert "GB/s" not in header and "of copy" not in header and "speedup [95% CI]" in header


def test_setup_timing_sets_threads_fill_and_cache():
    import torch._inductor.config

    threads, fill = torch.get_num_threads(), torch.utils.deterministic.fill_uninitialized_memory
    cache = torch._inductor.config.fx_graph_cache
    try:
        kept = bench.setup_timing(1)
        assert torch.get_num_threads() == 1
        assert torch.utils.deterministic.fill_uninitialized_memory is False
        assert torch._inductor.config.fx_graph_cache is False
        assert isinstance(kept, bool)
    finally:
        torch.set_num_threads(threads)
        torch.utils.deterministic.fill_uninitialized_memory = fill
        torch._inductor.config.fx_graph_cache = cache
