import math

import numpy as np
import pytest

from course_embed.lab import diagnostics


def results() -> dict:
    """A results file in miniature: two models, two seeds, three lengths, 2 layers x 2 heads."""

    def run(model, seed, shift):
        heads = [[[0.1 + shift, 0.2], [0.9 - shift, 0.3]], [[0.5, 0.1], [0.2, 0.4]], None]
        return {"model": model, "seed": seed, "loss": [1.0 + shift, 2.0, None], "induction": heads}

    return {
        "models": ["a", "b"],
        "runs": [run("b", 1, 0.2), run("a", 0, 0.0), run("a", 1, 0.1), run("b", 0, 0.05)],
    }


def test_per_model_orders_seeds_and_marks_missing_values_nan():
    loss = diagnostics.per_model(results(), "loss")
    assert list(loss) == ["a", "b"]
    np.testing.assert_array_equal(loss["a"][:, :2], [[1.0, 2.0], [1.1, 2.0]])
    assert np.isnan(loss["b"][:, 2]).all()


def test_spread_is_mean_min_max_over_seeds():
    mean, low, high = diagnostics.spread(np.array([[1.0, 4.0], [3.0, 2.0]]))
    np.testing.assert_array_equal(mean, [2.0, 3.0])
    np.testing.assert_array_equal(low, [1.0, 2.0])
    np.testing.assert_array_equal(high, [3.0, 4.0])


def test_tracked_head_follows_the_head_strongest_at_the_first_length():
    tracked = diagnostics.tracked_head(results(), "induction", layer=1)
    # seed 0 of "a": layer 1 is [0.9, 0.3] at the first length -> head 0, then [0.2, 0.4] -> 0.2 (not the max 0.4)
    np.testing.assert_allclose(tracked["a"][0, :2], [0.9, 0.2])
    assert np.isnan(tracked["a"][:, 2]).all()
    # seed 1 of "b" (shift 0.2): layer 0 is [0.3, 0.2] -> head 0
    np.testing.assert_allclose(diagnostics.tracked_head(results(), "induction", layer=0)["b"][1, :2], [0.3, 0.5])


@pytest.mark.parametrize("base", [10.0, 10000.0])
def test_angle_coverage_is_distance_times_frequency_in_turns(base):
    seen, test = diagnostics.angle_coverage(16, base, 64, 512)
    for i in range(8):
        theta = base ** (-2 * i / 16)
        assert seen[i] == pytest.approx(63 * theta / (2 * math.pi), rel=1e-12)
        assert test[i] == pytest.approx(511 * theta / (2 * math.pi), rel=1e-12)
