"""The linear probe against the Gaussian Bayes rule it implements, and its input checks."""

import pytest
import torch
import torch.nn.functional as F

from course_embed.lab import probe


def reference_lda_accuracy(x, y, k, ridge, n_train, tolerance=0):
    """Bayes rule with the fitted Gaussians, via MultivariateNormal.log_prob (an independent formulation)."""
    x, y = x.double(), y.long()
    xt, yt = x[:n_train], y[:n_train]
    means = torch.stack([xt[yt == c].mean(dim=0) for c in range(k)])
    scatter = sum((xt[yt == c] - means[c]).T @ (xt[yt == c] - means[c]) for c in range(k)) / n_train
    cov = scatter + ridge * torch.trace(scatter) / x.shape[1] * torch.eye(x.shape[1], dtype=x.dtype)
    dist = torch.distributions.MultivariateNormal(means, covariance_matrix=cov)
    predicted = dist.log_prob(x[n_train:, None, :]).argmax(dim=1)
    return ((predicted - y[n_train:]).abs() <= tolerance).double().mean().item()


@pytest.mark.parametrize("tolerance", [0, 1])
def test_lda_probe_equals_gaussian_bayes_rule(gen, tolerance):
    k, d, n = 6, 5, 600
    centres = torch.randn(k, d, generator=gen) * 1.5
    y = torch.randint(0, k, (n,), generator=gen)
    mixing = torch.randn(d, d, generator=gen)
    x = centres[y] + torch.randn(n, d, generator=gen) @ mixing  # correlated noise: LDA must whiten it
    acc = probe.lda_probe(x, y, k, tolerance=tolerance, ridge=1e-3)
    assert acc == pytest.approx(reference_lda_accuracy(x, y, k, 1e-3, 450, tolerance), abs=1e-12)
    assert 1 / k < acc < 1


def test_lda_predict_returns_the_held_out_rows(gen):
    y = torch.randint(0, 4, (100,), generator=gen)
    x = F.one_hot(y, 4).double() + 0.01 * torch.randn(100, 4, generator=gen, dtype=torch.float64)
    predicted, true = probe.lda_predict(x, y, 4, train_fraction=0.6)
    assert torch.equal(true, y[60:]) and torch.equal(predicted, y[60:])


def test_lda_predict_never_names_a_class_absent_from_the_fit(gen):
    x = torch.randn(40, 3, generator=gen)
    y = torch.cat((torch.randint(0, 2, (30,), generator=gen), torch.full((10,), 2)))  # class 2 only held out
    x[30:] = 0.0  # at the origin, where the zero mean of an empty class would score highest
    predicted, true = probe.lda_predict(x, y, 3)
    assert (predicted != 2).all() and (true == 2).all()


def test_lda_probe_separable_and_unrelated_labels(gen):
    y = torch.randint(0, 10, (2000,), generator=gen)
    x = F.one_hot(y, 10).double() + 0.01 * torch.randn(2000, 10, generator=gen, dtype=torch.float64)
    assert probe.lda_probe(x, y, 10) == 1.0
    unrelated = torch.randint(0, 10, (2000,), generator=gen)
    assert probe.lda_probe(x, unrelated, 10) < 0.2


@pytest.mark.parametrize(
    "args, match",
    [
        ((torch.zeros(5, 2), torch.zeros(4, dtype=torch.long), 2), r"features must be \(n, d\)"),
        ((torch.zeros(5, 2), torch.tensor([0, 1, 2, 0, 1]), 2), r"labels must lie in \[0, n_classes=2\)"),
    ],
)
def test_lda_probe_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        probe.lda_probe(*args)
    with pytest.raises(ValueError, match="train_fraction"):
        probe.lda_probe(torch.zeros(5, 2), torch.zeros(5, dtype=torch.long), 2, train_fraction=1.0)


def test_nearest_mean_is_the_nearest_mean_by_distance(gen):
    x, means = torch.randn(200, 6, generator=gen), torch.randn(9, 6, generator=gen) * 2
    expected = torch.cdist(x.double(), means.double()).argmin(dim=1)
    assert torch.equal(probe.nearest_mean_predict(x, means), expected)


def test_nearest_mean_equals_lda_with_known_means_and_identity_covariance(gen):
    # LDA's rule x . S^-1 m - m . S^-1 m / 2 with S = I is the nearest-mean rule
    means = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    x = torch.randn(100, 4, generator=gen, dtype=torch.float64)
    lda = (x @ means.T - 0.5 * (means * means).sum(-1)).argmax(-1)
    assert torch.equal(probe.nearest_mean_predict(x, means), lda)


def test_nearest_mean_bad_input():
    with pytest.raises(ValueError, match=r"means \(k, d\) with the same d"):
        probe.nearest_mean_predict(torch.zeros(3, 4), torch.zeros(2, 5))
