"""Chapter 1, token embedding: initialisation statistics, parameter counts of published models, and the figures.

Shapes: ``v`` vocabulary size, ``d`` model width, ``k`` rows compared. Figures are returned, never shown here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch

from .series import as_series


def init_std(init: str, vocab_size: int, d_model: int) -> float:
    """Closed-form standard deviation of a freshly initialised ``(v, d)`` table.

    ``"normal"`` (``nn.Embedding``'s default) is N(0, 1); ``"xavier_uniform"`` is U(±a) with
    ``a = sqrt(6 / (v + d))``, std ``a / sqrt(3) = sqrt(2 / (v + d))``; ``"scaled_normal"`` is N(0, 1/d), std
    ``d**-0.5``.
    """
    stds = {"normal": 1.0, "xavier_uniform": math.sqrt(2.0 / (vocab_size + d_model)), "scaled_normal": d_model**-0.5}
    if init not in stds:
        raise ValueError(f"init must be one of {tuple(stds)}, got {init!r}")
    return stds[init]


def row_norms(weight: torch.Tensor) -> torch.Tensor:
    """Euclidean norm of every row of a ``(v, d)`` table, computed in float64: ``(v,)``."""
    return weight.detach().double().norm(dim=-1)


@dataclass(frozen=True)
class ModelConfig:
    """The sizes that fix a Transformer's parameter count (enough for BERT, GPT-2 and LLaMA-style models).

    ``positions`` is the number of rows of a learned position table (0 for sinusoidal or rotary positions),
    ``token_types`` the rows of BERT's segment table. ``gated_ffn`` means a SwiGLU feed-forward with three
    matrices; ``norm`` is ``"layer"`` (weight and bias) or ``"rms"`` (weight only). ``output`` is ``"tied"``
    (the pre-softmax layer reuses the token table), ``"untied"`` (its own ``(v, d)`` matrix) or ``"none"``
    (an encoder counted without its head).
    """

    name: str
    vocab_size: int
    d_model: int
    n_layers: int
    d_ff: int
    positions: int = 0
    token_types: int = 0
    bias: bool = True
    gated_ffn: bool = False
    norm: str = "layer"
    embedding_norm: bool = False
    final_norm: bool = True
    output: str = "tied"
    pooler: bool = False


def parameter_count(cfg: ModelConfig) -> dict[str, int]:
    """Parameters of ``cfg`` by part: ``token``, ``position``, ``other_embedding``, ``layers``, ``head``, ``total``.

    ``token`` counts the ``(v, d)`` table once even when it is tied to the output layer.
    """
    d = cfg.d_model
    norm = 2 * d if cfg.norm == "layer" else d
    attention = 4 * d * d + (4 * d if cfg.bias else 0)
    if cfg.gated_ffn:
        ffn = 3 * d * cfg.d_ff + ((2 * cfg.d_ff + d) if cfg.bias else 0)
    else:
        ffn = 2 * d * cfg.d_ff + ((cfg.d_ff + d) if cfg.bias else 0)
    parts = {
        "token": cfg.vocab_size * d,
        "position": cfg.positions * d,
        "other_embedding": cfg.token_types * d + (norm if cfg.embedding_norm else 0),
        "layers": cfg.n_layers * (attention + ffn + 2 * norm),
        "head": (
            (norm if cfg.final_norm else 0)
            + (cfg.vocab_size * d if cfg.output == "untied" else 0)
            + (d * d + d if cfg.pooler else 0)
        ),
    }
    parts["total"] = sum(parts.values())
    return parts


#: Published configurations; their totals match the released checkpoints (tested).
BERT_BASE = ModelConfig(
    "BERT-base",
    30522,
    768,
    12,
    3072,
    positions=512,
    token_types=2,
    embedding_norm=True,
    final_norm=False,
    output="none",
    pooler=True,
)
BERT_LARGE = ModelConfig(
    "BERT-large",
    30522,
    1024,
    24,
    4096,
    positions=512,
    token_types=2,
    embedding_norm=True,
    final_norm=False,
    output="none",
    pooler=True,
)
GPT2_SMALL = ModelConfig("GPT-2 small", 50257, 768, 12, 3072, positions=1024)
LLAMA2_7B = ModelConfig("LLaMA-2 7B", 32000, 4096, 32, 11008, bias=False, gated_ffn=True, norm="rms", output="untied")
PUBLISHED_CONFIGS = (BERT_BASE, BERT_LARGE, GPT2_SMALL, LLAMA2_7B)


# --- figures -----------------------------------------------------------------------------------------------


def plot_cosines(panels: dict[str, torch.Tensor], labels: list[str]):
    """One heatmap per panel of a ``(k, k)`` cosine matrix, rows and columns named by ``labels`` (``k`` words)."""
    if not panels:
        raise ValueError("panels is empty; pass {title: (k, k) cosine matrix} for at least one panel")
    fig, axes = plt.subplots(1, len(panels), figsize=(3.7 * len(panels), 3.6), squeeze=False)
    for ax, (title, cos) in zip(axes[0], panels.items(), strict=True):
        if cos.shape != (len(labels), len(labels)):
            raise ValueError(f"panels[{title!r}] must be ({len(labels)}, {len(labels)}), got {tuple(cos.shape)}")
        image = ax.imshow(cos.double().numpy(), cmap="RdBu", vmin=-1, vmax=1)
        ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=axes[0].tolist(), fraction=0.02, label="cosine similarity")
    return fig


def plot_seed_dots(panels: dict[str, tuple[str, dict[str, list[float]]]]):
    """One dot per seed for each run, one panel per question, side by side.

    ``panels`` maps a panel's title to ``(x label, {run label: one value per seed})``; runs are drawn top to bottom in
    order, each seed a dot on its run's line, so the spread over seeds is what the eye compares. A dotted line marks 0.
    """
    if not panels:
        raise ValueError("panels is empty; pass {title: (x label, {run: values per seed})} for at least one panel")
    heights = [max(len(runs), 2) for _, runs in panels.values()]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 0.45 * max(heights) + 1.4), squeeze=False)
    for ax, (title, (xlabel, runs)) in zip(axes[0], panels.items(), strict=True):
        if not runs:
            raise ValueError(f"panels[{title!r}] has no runs; give at least one run with its values per seed")
        for row, (label, values) in enumerate(runs.items()):
            values = as_series(f"panels[{title!r}][{label!r}]", values)
            ax.plot(values, [row] * len(values), "o", color="tab:blue", alpha=0.6, markersize=6)
        ax.axvline(0.0, color="gray", linestyle=":", linewidth=1)
        ax.set_yticks(range(len(runs)), list(runs), fontsize=8)
        ax.set_ylim(len(runs) - 0.5, -0.5)  # the first run on top
        ax.set_xlabel(xlabel, fontsize=9)
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def plot_row_gradients(grad_norms, counts, pad_id: int, control=None):
    """Bar chart of each row's gradient norm, with how often each id was used; the pad row is marked at 0.

    ``grad_norms`` and ``counts`` hold one value per id ``(v,)``. ``control`` (optional, ``(v,)``): the same
    rows' gradient norms without ``padding_idx``, drawn as a second bar beside each.
    """
    grads = as_series("grad_norms", grad_norms)
    used = as_series("counts", counts, length=len(grads))
    if not 0 <= pad_id < len(grads):
        raise ValueError(f"pad_id must lie in [0, {len(grads)}), got {pad_id}")
    other = None if control is None else as_series("control", control, length=len(grads))
    width = 0.8 if other is None else 0.4
    shift = 0.0 if other is None else -0.2
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.bar([i + shift for i in range(len(grads))], grads, width, color="tab:blue", label=f"padding_idx={pad_id}")
    top = max(grads) if other is None else max(max(grads), max(other))
    if other is not None:
        ax.bar([i + 0.2 for i in range(len(grads))], other, width, color="tab:gray", label="padding_idx=None")
        ax.legend(loc="upper right", fontsize=8)
    ax.plot(pad_id + shift, 0, marker="x", color="tab:red", markersize=10, mew=2, clip_on=False, zorder=3)
    ax.annotate(
        f"pad (id {pad_id}): used {used[pad_id]:.0f}x, gradient exactly 0 with padding_idx={pad_id}",
        (pad_id + shift, 0),
        (pad_id - 0.1, top * 1.2),  # above the pad's slot
        color="tab:red",
        fontsize=9,
        arrowprops={"arrowstyle": "->", "color": "tab:red", "relpos": (0.0, 0.0)},
    )
    for i, (g, n) in enumerate(zip(grads, used, strict=True)):
        if i != pad_id:
            ax.text(i, max(g, 0.0 if other is None else other[i]), f"x{n:.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(grads)))
    ax.set_xlabel("token id (numbers above the bars: times used in the batch)")
    ax.set_ylabel("gradient norm of the row")
    ax.set_title(
        "The pad row is used most, yet gets no gradient"
        if other is None
        else "The pad row is used most; only padding_idx stops its gradient"
    )
    ax.set_ylim(0, top * 1.4)
    fig.tight_layout()
    return fig


def plot_row_norm_histograms(norms: dict[str, torch.Tensor], position_norm: float, vocab_size: int, d_model: int):
    """Histograms (log x axis) of the row norms of each init's table, and the position norm as a dashed line.

    The title gives the ratio of the largest to the smallest mean row norm.
    """
    if not norms:
        raise ValueError("norms is empty; pass {init: (v,) row norms} for at least one table")
    fig, ax = plt.subplots(figsize=(7, 3))
    bins = torch.logspace(-1, 1.6, 120).numpy()
    for (init, values), color in zip(norms.items(), ("tab:red", "tab:green", "tab:blue", "tab:orange"), strict=False):
        as_series(f"norms[{init!r}]", values.flatten().tolist(), positive=True)
        ax.hist(values.double().numpy(), bins=bins, color=color, alpha=0.8, label=init)
    ax.axvline(position_norm, color="black", linestyle="--", label=r"sinusoidal position row, $\sqrt{d/2}$")
    means = [v.double().mean().item() for v in norms.values()]
    ax.set_xscale("log")
    ax.set_xlabel(f"row norm (V = {vocab_size}, d = {d_model})")
    ax.set_ylabel("rows")
    ax.set_title(f"Mean row norms differ by a factor of {max(means) / min(means):.0f} across init schemes")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_embedding_share(configs, shares: list[float]):
    """The token table's share of the parameters against ``12 L d / V``, with the two estimates.

    A model with one ``(v, d)`` table (tied, or counted without an output layer) follows ``1 / (1 + 12 L d / V)``;
    the input table of an untied model, which has a second ``(v, d)`` matrix in its output layer, follows
    ``1 / (2 + 12 L d / V)``. ``configs`` are :class:`ModelConfig` and ``shares`` their exact shares of the input
    table (fractions), in the same order; untied models are drawn as squares.
    """
    configs = list(configs)
    shares = as_series("shares", shares, length=len(configs), positive=True)
    x = [12 * c.n_layers * c.d_model / c.vocab_size for c in configs]
    fig, ax = plt.subplots(figsize=(7, 3))
    grid = torch.logspace(-0.5, 1.8, 100)
    ax.plot(grid, 100 / (1 + grid), color="gray", linestyle="--", label="one table: 1 / (1 + 12Ld/V)")
    ax.plot(grid, 100 / (2 + grid), color="gray", linestyle=":", label="untied, input table: 1 / (2 + 12Ld/V)")
    for untied, marker, label in ((False, "o", "exact, one table"), (True, "s", "exact, untied")):
        pts = [(xi, 100 * s) for xi, s, c in zip(x, shares, configs, strict=True) if (c.output == "untied") == untied]
        if pts:
            ax.scatter(*zip(*pts, strict=True), color="tab:blue", marker=marker, zorder=3, label=label)
    for xi, share, cfg in zip(x, shares, configs, strict=True):
        left = xi > 20 or cfg.output == "untied"  # untied labels go left, off the tied curve's labels
        shift = (-6, 4) if left else (5, 4)
        ax.annotate(
            cfg.name, (xi, 100 * share), shift, textcoords="offset points", fontsize=8, ha="right" if left else "left"
        )
    ax.set_xscale("log")
    ax.set_xlabel("12 L d / V  (rest of the model / token table, roughly)")
    ax.set_ylabel("input token table, % of parameters")
    ax.set_title("The share follows V against 12 L d: width counts as much as depth")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
