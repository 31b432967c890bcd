"""Chapter 3, sinusoidal mathematics: wavelengths, the offset rotation, dot products by offset, precision, and
figures.

Shapes: ``s`` positions, ``d`` model width. Figures are returned as ``Figure`` objects and never shown here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.patheffects as pe
import matplotlib.pyplot as plt
import torch
from matplotlib.colors import to_rgb

from ..sinusoidal import inverse_frequencies, offset_rotation, sinusoidal_table

_outline = [pe.Stroke(linewidth=4, foreground="white"), pe.Normal()]  # a thick line stays readable over noise


def wavelengths(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """Wavelength, in positions, of every dimension: ``(d,)`` float64.

    Dimensions ``2i`` (sine) and ``2i + 1`` (cosine) share the wavelength ``2*pi * base**(2i/d)``: a geometric
    progression from ``2*pi`` (dimensions 0 and 1, the fastest) to ``2*pi * base**((d-2)/d)`` (the last pair,
    the slowest, just under ``base * 2*pi``).
    """
    return (2 * math.pi / inverse_frequencies(d_model, base)).repeat_interleave(2)


def _check_table(table: torch.Tensor, min_rows: int = 1) -> None:
    if not isinstance(table, torch.Tensor) or table.dim() != 2 or table.shape[0] < min_rows:
        shape = tuple(table.shape) if isinstance(table, torch.Tensor) else type(table).__name__
        raise ValueError(f"table must be a (positions, d_model) tensor with at least {min_rows} rows, got {shape}")


def adjacent_change(table: torch.Tensor) -> torch.Tensor:
    """How fast each column changes: the mean of ``|PE[p + 1, j] - PE[p, j]|`` over positions.

    ``(s, d) -> (d,)`` float64, ``s >= 2``. Large for the fast (low-index) dimensions of a sinusoidal table.
    """
    _check_table(table, min_rows=2)
    t = table.detach().double()
    return (t[1:] - t[:-1]).abs().mean(dim=0)


def rotation_error(
    k: int,
    d_model: int,
    *,
    length: int = 1000,
    offset: int = 0,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float64,
    device=None,
) -> float:
    """Largest ``|M_k @ PE[p] - PE[p + k]|`` over ``p = offset .. offset + length - 1``.

    The table (:func:`~course_embed.sinusoidal_table`) and ``M_k`` (:func:`~course_embed.offset_rotation`) are
    both stored in ``dtype`` and multiplied in ``dtype``: the result is the rounding error of that precision,
    since ``PE[p + k] = M_k @ PE[p]`` holds exactly in real arithmetic.
    """
    if not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be an int >= 0 (an offset in positions), got {k!r}")
    if length < 1:
        raise ValueError(f"length must be >= 1 (number of positions p to check), got {length}")
    table = sinusoidal_table(length + k, d_model, base, offset=offset, dtype=dtype, device=device)  # (s + k, d)
    rotation = offset_rotation(k, d_model, base, dtype=dtype).to(table.device)  # (d, d)
    moved = table[:length] @ rotation.T  # (s, d): row p is M_k @ PE[p]
    return (moved - table[k:]).abs().max().item()


def dot_by_offset(max_offset: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """``PE[p] . PE[p + k] = sum_i cos(w_i k)`` for ``k = 0 .. max_offset``: ``(max_offset + 1,)`` float64.

    Closed form: ``sin(a) sin(b) + cos(a) cos(b) = cos(a - b)`` for each pair, so the dot product depends only on
    the offset ``k``, not on ``p``. It starts at ``d/2`` (``k = 0``).
    """
    if max_offset < 0:
        raise ValueError(f"max_offset must be >= 0, got {max_offset}")
    offsets = torch.arange(max_offset + 1, dtype=torch.float64)  # (k,)
    return torch.cos(offsets[:, None] * inverse_frequencies(d_model, base)).sum(dim=1)  # (k, d/2) -> (k,)


def first_rise(d_model: int, base: float = 10000.0, max_offset: int = 10000) -> int | None:
    """The smallest offset ``k >= 1`` with ``dot(k) > dot(k - 1)``: where the dot product stops falling.

    ``None`` if it falls all the way to ``max_offset``.
    """
    dots = dot_by_offset(max_offset, d_model, base)
    rises = torch.nonzero(dots[1:] > dots[:-1]).flatten()
    return int(rises[0]) + 1 if rises.numel() else None


@dataclass(frozen=True)
class ClosestRows:
    """The closest pair of distinct rows of a table: Euclidean ``distance`` between rows ``first < second``."""

    distance: float
    first: int
    second: int


def closest_distinct_rows(table: torch.Tensor) -> ClosestRows:
    """The two distinct rows (different indices) of a ``(s, d)`` table that are closest in Euclidean distance.

    Brute force over all ``s * (s - 1) / 2`` pairs, computed in float64 as ``sqrt(sum((a - b)**2))`` (not the
    matrix-product shortcut, which cannot resolve a distance of exactly 0). Memory grows as ``s**2``. Ties go to
    the first pair in ``(first, second)`` order; rows holding NaN are never closest.
    """
    _check_table(table, min_rows=2)
    t = table.detach().double().cpu()
    dist = torch.cdist(t, t, compute_mode="donot_use_mm_for_euclid_dist")  # (s, s)
    upper = torch.ones_like(dist, dtype=torch.bool).triu(diagonal=1)
    dist = torch.where(upper & ~dist.isnan(), dist, torch.inf)
    index = int(torch.argmin(dist))
    first, second = divmod(index, t.shape[0])
    return ClosestRows(float(dist[first, second]), first, second)


def table_error(table: torch.Tensor, offset: int = 0, base: float = 10000.0) -> float:
    """Largest ``|table - PE|`` against the float64 closed form, for a ``(s, d)`` table of positions
    ``offset .. offset + s - 1``. NaN if the table holds NaN, inf if it holds inf.
    """
    _check_table(table)
    reference = sinusoidal_table(
        table.shape[0], table.shape[1], base, offset=offset, dtype=torch.float64, device=table.device
    )  # (s, d)
    return (table.detach().double() - reference).abs().max().item()


def naive_table(
    length: int, d_model: int, dtype: torch.dtype, *, offset: int = 0, base: float = 10000.0, device=None
) -> torch.Tensor:
    """A deliberately buggy sinusoidal table: positions, frequencies and angles all computed in ``dtype``.

    This is what an implementation does when it builds ``arange(max_len)`` in the model's dtype, or computes the
    angles as a matrix product under autocast (autocast casts matrix products, not elementwise ones). In bfloat16,
    integers are exact only up to 256, so positions 257, 259, ... round to their neighbours and rows repeat; in
    float16, positions from 65520 on overflow to inf and ``sin(inf)`` is NaN. Compare
    :func:`~course_embed.sinusoidal_table`, which computes angles in float64 and casts at the end.

    Returns ``(s, d)`` in ``dtype``, sines in even columns, cosines in odd ones.
    """
    if length < 0 or offset < 0:
        raise ValueError(f"length and offset must be >= 0, got length={length}, offset={offset}")
    positions = torch.arange(offset, offset + length, device=device).to(dtype)  # (s,): the bug, rounded to dtype
    angles = positions[:, None] * inverse_frequencies(d_model, base, device=device, dtype=dtype)  # (s, d/2)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # (s, d)


def first_repeated_row(table: torch.Tensor) -> tuple[int, int] | None:
    """The first row of a ``(s, d)`` table equal to an earlier row, as ``(row, earlier_row)``; ``None`` if all differ.

    Rows are compared by value; a row holding NaN or inf is never counted as a repeat.
    """
    _check_table(table)
    t = table.detach().cpu()
    finite = torch.isfinite(t).all(dim=1)  # (s,)
    rows = torch.nonzero(finite).flatten()  # indices of the finite rows
    if rows.numel() < 2:
        return None
    _, group = torch.unique(t[finite].double(), dim=0, return_inverse=True)  # equal rows share a group
    first_in_group = torch.full((int(group.max()) + 1,), t.shape[0], dtype=torch.long)
    first_in_group = first_in_group.scatter_reduce(0, group, rows, reduce="amin")
    earlier = first_in_group[group]  # for every finite row, the first row equal to it
    repeats = torch.nonzero(earlier < rows).flatten()
    if not repeats.numel():
        return None
    return int(rows[repeats[0]]), int(earlier[repeats[0]])


def first_nonfinite_row(table: torch.Tensor) -> int | None:
    """Index of the first row of a ``(s, d)`` table that holds NaN or inf; ``None`` if every value is finite."""
    _check_table(table)
    bad = torch.nonzero(~torch.isfinite(table.detach()).all(dim=1)).flatten()
    return int(bad[0]) if bad.numel() else None


def unseen_angle_gap(train_len: int, test_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """How far positions ``train_len .. test_len - 1`` take each sin/cos pair from the angles seen in training.

    For pair ``i`` (frequency ``w_i``), the training positions ``0 .. train_len - 1`` put the pair at angles
    ``w_i * p (mod 2*pi)`` on its circle. The result is, for each pair, the largest angular distance (radians, in
    ``[0, pi]``) from a test position's angle to the nearest training angle: ``(d/2,)`` float64, fastest pair first.
    Near 0 for pairs that turned many times during training; large for pairs that had not completed a turn.
    """
    if not 1 <= train_len < test_len:
        raise ValueError(f"need 1 <= train_len < test_len, got train_len={train_len}, test_len={test_len}")
    turn = 2 * math.pi
    seen_positions = torch.arange(train_len, dtype=torch.float64)
    new_positions = torch.arange(train_len, test_len, dtype=torch.float64)
    gaps = []
    for w in inverse_frequencies(d_model, base).tolist():
        seen = torch.sort((seen_positions * w) % turn).values  # (train_len,)
        new = (new_positions * w) % turn  # (test_len - train_len,)
        right = torch.searchsorted(seen, new)  # index of the first seen angle >= new angle (wraps to 0)
        above = (seen[right % train_len] - new) % turn  # going up the circle to the next seen angle
        below = (new - seen[(right - 1) % train_len]) % turn  # going down to the previous one
        gaps.append(torch.minimum(above, below).max())
    return torch.stack(gaps)


def _heatmap(ax, table: torch.Tensor, d_model: int, base: float):
    """Draw a ``(s, d_shown)`` slice of a sinusoidal table: positions down, dimensions across, wavelengths on top."""
    shown = table.shape[1]
    image = ax.imshow(
        table.detach().cpu().float().numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest"
    )
    ax.set_xlabel("dimension index (0 = fastest)")
    ax.set_ylabel("position")
    # even spacing at pair boundaries (0, shown/4, shown/2, 3 shown/4), and the last pair
    ticks = sorted({min(2 * int(f * shown / 2), shown - 2) for f in (0, 0.25, 0.5, 0.75, 1)})
    lengths = wavelengths(d_model, base)
    top = ax.secondary_xaxis("top")
    top.set_xticks(ticks, labels=[f"{w:.3g}" if w < 1000 else f"{w:,.0f}" for w in lengths[ticks].tolist()])
    top.set_xlabel("wavelength in positions (short = fast)", fontsize=9)
    return image


def halves_layout(table: torch.Tensor) -> torch.Tensor:
    """Reorder interleaved ``[sin0, cos0, sin1, cos1, ...]`` columns to ``[sin0, sin1, ... | cos0, cos1, ...]``,
    the layout of Tensor2Tensor and fairseq: ``(s, d) -> (s, d)``."""
    _check_table(table)
    return torch.cat((table[:, 0::2], table[:, 1::2]), dim=1)


def plot_heatmap(length: int = 100, d_model: int = 512, dims: int = 128, base: float = 10000.0, halves: bool = False):
    """Heatmap of the first ``dims`` dimensions of a ``(length, d_model)`` sinusoidal table, labelled correctly.

    Low dimension indices (left) are the fast, short-wavelength ones; wavelengths grow to the right. With
    ``halves``, a second panel shows the same ``dims // 2`` pairs in the ``[sin | cos]`` layout
    (:func:`halves_layout`), where the interleaving stripes disappear.
    """
    if not 2 <= dims <= d_model:
        raise ValueError(f"dims must lie in [2, d_model={d_model}], got {dims}")
    table = sinusoidal_table(length, d_model, base)[:, :dims]  # (s, dims)
    fig, axes = plt.subplots(
        1, 2 if halves else 1, figsize=(11 if halves else 8, 4.4), squeeze=False, layout="constrained"
    )
    image = _heatmap(axes[0, 0], table, d_model, base)
    if halves:
        axes[0, 0].set_title("interleaved: sin, cos, sin, cos, ... (the paper, this course)", fontsize=9)
        right = axes[0, 1]
        right.imshow(
            halves_layout(table).numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest"
        )
        right.axvline(dims / 2 - 0.5, color="k", lw=1)
        right.set_xlabel(f"column: sines of pairs 0-{dims // 2 - 1}, then their cosines")
        right.set_ylabel("position")
        right.set_title("[sin | cos] layout of Tensor2Tensor/fairseq, with this page's frequencies", fontsize=9)
    fig.colorbar(image, ax=list(axes.flat), label="PE value")
    fig.suptitle(f"d_model = {d_model}, first {dims} dimensions: left changes fast, right slowly", fontsize=10)
    return fig


def plot_offset_scores(scores: torch.Tensor, k: int, title: str = ""):
    """A ``(s, s)`` score matrix as a heatmap (query ``p`` down, key ``q`` across) with the line ``q = p - k``."""
    if scores.dim() != 2 or scores.shape[0] != scores.shape[1]:
        raise ValueError(f"scores must be a square (queries, keys) matrix, got {tuple(scores.shape)}")
    s = scores.shape[0]
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    image = ax.imshow(scores.detach().double().numpy(), cmap="viridis", interpolation="nearest")
    ax.plot(range(0, s - k), range(k, s), ls=(0, (2, 4)), color="tab:red", lw=1, label=f"q = p - {k}")
    ax.set_xlim(-0.5, s - 0.5)
    ax.set_ylim(s - 0.5, -0.5)
    ax.set_xlabel("key position q")
    ax.set_ylabel("query position p")
    ax.legend(fontsize=8, loc="upper right")
    fig.colorbar(image, ax=ax, label="score")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def plot_score_terms(terms: dict[str, torch.Tensor], title: str = ""):
    """Heatmaps of the terms of an attention score, each ``(s, s)`` (query down, key across), one colour scale."""
    if not terms or any(t.dim() != 2 for t in terms.values()):
        raise ValueError("terms must map names to (queries, keys) matrices")
    limit = max(t.abs().max().item() for t in terms.values())
    fig, axes = plt.subplots(1, len(terms), figsize=(2.9 * len(terms), 3.1), squeeze=False)
    for ax, (name, term) in zip(axes[0], terms.items(), strict=False):
        image = ax.imshow(
            term.detach().double().numpy(), cmap="RdBu_r", vmin=-limit, vmax=limit, interpolation="nearest"
        )
        ax.set_title(f"{name}\n(std {term.double().std().item():.2f})", fontsize=9)
        ax.set_xlabel("key position q")
    axes[0, 0].set_ylabel("query position p")
    fig.colorbar(image, ax=list(axes[0]), label="score term", shrink=0.8)
    fig.suptitle(title, fontsize=10)
    return fig


def explorer_dims(d_model: int) -> list[int]:
    """The sine columns the explorer draws as curves: ``0, d/8, d/4, d/2`` (rounded down to even)."""
    return sorted({2 * (d_model // (2 * f)) if f else 0 for f in (0, 8, 4, 2)})


def plot_explorer(d_model: int = 128, base: float = 10000.0, positions: int = 100, halves: bool = False):
    """Two panels for a ``(positions, d_model)`` sinusoidal table: the heatmap, and a few columns as curves.

    The curves are the sine columns :func:`explorer_dims`, labelled by their dimension in the interleaved layout
    (the one the formula and the chapter use) and their pair; a triangle of the curve's colour above the heatmap
    marks the column each curve is, in whichever layout the heatmap shows. By default the heatmap is interleaved,
    as the indices are; with ``halves`` it shows the ``[sin | cos]`` layout (:func:`halves_layout`), where the sine
    of pair ``i`` is column ``i``. The widget in :mod:`course_embed.lab.widgets` redraws this figure when its
    sliders move.
    """
    if positions < 2:
        raise ValueError(f"positions must be >= 2, got {positions}")
    table = sinusoidal_table(positions, d_model, base)  # (s, d)
    lengths = wavelengths(d_model, base)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    if halves:
        image = left.imshow(
            halves_layout(table).numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest"
        )
        left.set_xlabel(f"[sin | cos]: sines of pairs 0 .. {d_model // 2 - 1} (fast to slow), then their cosines")
        left.set_ylabel("position")
    else:
        image = _heatmap(left, table, d_model, base)
    fig.colorbar(image, ax=left, label="PE value")
    for j in explorer_dims(d_model):
        (line,) = right.plot(
            range(positions),
            table[:, j].numpy(),
            label=f"dim {j}: sine of pair {j // 2} (wavelength {lengths[j].item():.3g})",
        )
        column = j // 2 if halves else j  # where that sine sits in the heatmap's layout
        left.plot([column], [-0.5], "v", color=line.get_color(), ms=7, clip_on=False)
    left.set_xlim(-0.5, d_model - 0.5)
    left.set_ylim(positions - 0.5, -0.5)
    right.set_xlabel("position")
    right.set_ylabel("PE value")
    right.set_ylim(-1.1, 1.1)
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1)  # below the axes
    layout = "[sin | cos] layout" if halves else "interleaved layout"
    fig.suptitle(
        f"sinusoidal encoding: d_model = {d_model}, base = {base:g}, {positions} positions, {layout}; "
        "triangles mark the curves' columns",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def windowed_mean(values: torch.Tensor, low: float = 0.9, high: float = 1.1) -> torch.Tensor:
    """The mean of ``values[int(low * k)] .. values[int(high * k)]`` for every ``k`` whose window fits:
    ``(n,) -> (m,)`` float64, ``m = (n - 1) / high + 1`` (rounded down), entry ``k`` for the window around ``k``."""
    if not 0 < low <= 1 <= high:
        raise ValueError(f"need 0 < low <= 1 <= high, got low={low}, high={high}")
    v = values.detach().double().flatten()
    sums = torch.cat((torch.zeros(1, dtype=torch.float64), v.cumsum(0)))  # sums[j] = v[0] + ... + v[j - 1]
    k = torch.arange(int((len(v) - 1) / high) + 1)
    first, last = (low * k).long(), (high * k).long()  # window of offsets first .. last
    return (sums[last + 1] - sums[first]) / (last - first + 1)


def plot_dot_by_offset(max_offset: int = 5000, d_models: tuple[int, ...] = (512, 64), base: float = 10000.0):
    """``PE[p] . PE[p + k] / (d/2)`` against the offset ``k`` (log axis), with each curve's first rise marked and
    its trend: the mean over the window of offsets ``0.9 k .. 1.1 k`` (:func:`windowed_mean`), drawn thick; the first
    width's trend has its lowest point marked, and a dotted line marks ``k = base``."""
    fig, ax = plt.subplots(figsize=(8, 3.4))
    offsets = torch.arange(1, max_offset + 1)
    trends = []
    for d in d_models:
        dots = dot_by_offset(int(1.1 * max_offset) + 1, d, base) / (d / 2)  # 1 at k = 0
        (line,) = ax.plot(offsets.numpy(), dots[1 : max_offset + 1].numpy(), lw=0.8, alpha=0.6, label=f"d_model = {d}")
        trends.append((d, line.get_color(), windowed_mean(dots)[1 : max_offset + 1]))
        rise = first_rise(d, base, max_offset)
        if rise is not None:
            ax.plot([rise], [dots[rise].item()], "o", color=line.get_color(), ms=6, mec="white", zorder=5)
            ax.annotate(
                f"first rise at k = {rise}",
                (rise, dots[rise].item()),
                textcoords="offset points",
                xytext=(8, 8),
                fontsize=8,
                color=line.get_color(),
            )
    start = 20  # below about 20 offsets a window holds too few of them to average the bumps
    for d, color, trend in reversed(trends):  # on top of every raw curve, the first width last
        dark = [0.6 * c for c in to_rgb(color)]
        ax.plot(
            offsets[start - 1 :].numpy(),
            trend[start - 1 :].numpy(),
            lw=2.2,
            color=dark,
            path_effects=_outline,
            label=f"d_model = {d}: mean over offsets 0.9k to 1.1k",
        )
    ax.axvline(base, color="gray", ls=":", lw=1)
    ax.annotate(
        f"k = base = {base:g}",
        (base, 0.97),
        xycoords=("data", "axes fraction"),
        xytext=(-4, 0),
        textcoords="offset points",
        ha="right",
        va="top",
        fontsize=8,
        color="gray",
    )
    ax.axhline(0, color="gray", lw=0.5)
    d, color, trend = trends[0]
    low = start + int(trend[start - 1 :].argmin())  # the offset where the first width's trend is lowest
    ax.plot([low], [trend[low - 1].item()], "v", color="black", ms=7, zorder=5)
    ax.annotate(
        f"d_model = {d}: trend lowest at k = {low}",
        (low, trend[low - 1].item()),
        textcoords="axes fraction",
        xytext=(0.98, 0.62),
        ha="right",
        fontsize=8,
        arrowprops={"arrowstyle": "->", "lw": 0.8},
    )
    ax.set_xscale("log")
    ax.set_xlabel("offset k = |p - q| (positions)")
    ax.set_ylabel("PE[p] . PE[q] / (d/2)")
    ax.set_title(
        f"PE(p) . PE(q) by offset (closed form), base {base:g}",
        fontsize=10,
    )
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    return fig


def plot_unseen_angles(train_len: int = 512, test_len: int = 2048, d_model: int = 512, base: float = 10000.0):
    """Per sin/cos pair, how far positions past ``train_len`` go from every angle seen in training (radians)."""
    gaps = unseen_angle_gap(train_len, test_len, d_model, base)  # (d/2,)
    turned = int((wavelengths(d_model, base)[::2] <= train_len).sum())  # pairs that completed a turn
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.plot(range(len(gaps)), gaps.numpy(), color="tab:red", lw=1.2)
    ax.axvline(turned - 0.5, color="gray", ls="--", lw=1)
    ax.text(
        turned,
        0.92 * math.pi,
        f"  pairs {turned}+ never completed a turn in {train_len} positions",
        fontsize=8,
        va="top",
    )
    ax.set_ylim(0, math.pi)
    ax.set_xlabel("pair index i (dimensions 2i, 2i + 1; 0 = fastest)")
    ax.set_ylabel("largest angle gap (rad)")
    ax.set_title(
        f"how far positions {train_len}-{test_len - 1} take each pair from its angles in positions 0-{train_len - 1}",
        fontsize=10,
    )
    fig.tight_layout()
    return fig
