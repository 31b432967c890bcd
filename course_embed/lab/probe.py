"""Linear probes: how much of a label (a token id, a position) a linear readout recovers from vectors.

Two readers, both linear in the vector ``x`` (score ``x . m_c - ||m_c||^2 / 2`` up to a whitening):

* :func:`lda_predict` / :func:`lda_probe` *fit* the class means and a shared covariance on the first rows and
  score the rest (linear discriminant analysis). Chapter 4 uses it on the vectors a fused input layer outputs
  (:func:`course_embed.lab.fusion.fusion_probe`), where the class means are unknown.
* :func:`nearest_mean_predict` is the same rule with the class means *given* and an isotropic covariance. Chapter 2
  reads the position and the token back from ``token + position`` with it, because there the means are known
  exactly (the position rows plus the mean token row, and the token rows plus the mean position row): estimating
  them from samples would only add noise (with N(0, 1) x sqrt(d) tokens, the error of a mean of 128 samples is
  larger than the distances between positions), and a low score could then be blamed on the estimate.

Neither is "the optimal" reader in general: nearest-mean is the Bayes rule only for isotropic Gaussian noise,
and LDA only for Gaussian classes with one shared covariance. A low score says that *this linear readout*
fails, not that no layer could recover the label.

Shapes: ``n`` vectors, ``d`` width, ``k`` classes, ``m`` held-out rows.
"""

from __future__ import annotations

import math

import torch


def lda_predict(
    features: torch.Tensor, labels: torch.Tensor, n_classes: int, train_fraction: float = 0.75, ridge: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fit a linear probe (linear discriminant analysis) on the first rows; predict the rest.

    Args:
        features: ``(n, d)``.
        labels: ``(n,)`` integers in ``[0, n_classes)``.
        n_classes: number of classes ``k``.
        train_fraction: the first ``train_fraction * n`` rows fit the probe; the other ``m`` rows are predicted.
        ridge: added to the shared covariance, relative to its mean diagonal, so it is always invertible.

    Returns:
        ``(predicted, true)`` labels of the held-out rows, two ``(m,)`` CPU tensors.

    The probe is Fisher's linear discriminant: class means ``mu_c`` and one within-class covariance ``S``; it
    predicts ``argmax_c x . S^-1 mu_c - mu_c . S^-1 mu_c / 2``, the Bayes rule for Gaussian classes with a shared
    covariance. It is fitted in closed form, in float64 on the CPU, so the result does not depend on the device.
    """
    if features.dim() != 2 or labels.shape != features.shape[:1]:
        raise ValueError(
            f"features must be (n, d) and labels (n,), got {tuple(features.shape)} and {tuple(labels.shape)}"
        )
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    x, y = features.detach().double().cpu(), labels.detach().long().cpu()
    if y.min() < 0 or y.max() >= n_classes:
        raise ValueError(
            f"labels must lie in [0, n_classes={n_classes}), got values in [{int(y.min())}, {int(y.max())}]"
        )
    n_train = int(train_fraction * len(x))
    if not 0 < n_train < len(x):
        raise ValueError(f"train_fraction={train_fraction} of {len(x)} rows leaves no rows to fit or to test")
    xt, yt = x[:n_train], y[:n_train]
    counts = torch.bincount(yt, minlength=n_classes).clamp(min=1).double()
    means = torch.zeros(n_classes, x.shape[1], dtype=x.dtype).index_add_(0, yt, xt) / counts[:, None]  # (k, d)
    centred = xt - means[yt]
    cov = centred.T @ centred / n_train
    cov += ridge * cov.diagonal().mean() * torch.eye(x.shape[1], dtype=x.dtype)
    weights = torch.linalg.solve(cov, means.T)  # (d, k)
    bias = -0.5 * (means * weights.T).sum(dim=1)  # (k,)
    bias[torch.bincount(yt, minlength=n_classes) == 0] = -math.inf  # a class absent from the fit is never predicted
    return (x[n_train:] @ weights + bias).argmax(dim=1), y[n_train:]


def lda_probe(
    features: torch.Tensor,
    labels: torch.Tensor,
    n_classes: int,
    train_fraction: float = 0.75,
    tolerance: int = 0,
    ridge: float = 1e-6,
) -> float:
    """Held-out accuracy of the linear probe :func:`lda_predict` reading ``labels`` from ``features`` ``(n, d)``.

    A prediction counts as right when ``|predicted - label| <= tolerance`` (for ordered labels such as positions).
    """
    predicted, true = lda_predict(features, labels, n_classes, train_fraction, ridge)
    return ((predicted - true).abs() <= tolerance).double().mean().item()


def nearest_mean_predict(features: torch.Tensor, means: torch.Tensor) -> torch.Tensor:
    """The class whose known mean is nearest to each vector: ``argmin_c ||x - m_c||``, as a linear score.

    Args:
        features: ``(n, d)`` vectors to read.
        means: ``(k, d)`` class means, known rather than fitted.

    Returns:
        ``(n,)`` predicted classes (CPU, int64): ``argmax_c x . m_c - ||m_c||^2 / 2``, computed in float64.
    """
    if features.dim() != 2 or means.dim() != 2 or features.shape[1] != means.shape[1]:
        raise ValueError(
            f"features must be (n, d) and means (k, d) with the same d, got "
            f"{tuple(features.shape)} and {tuple(means.shape)}"
        )
    x, m = features.detach().double().cpu(), means.detach().double().cpu()
    return (x @ m.T - 0.5 * m.pow(2).sum(dim=-1)).argmax(dim=-1)
