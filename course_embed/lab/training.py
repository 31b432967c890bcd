"""Tiny attention models trained for seconds (chapters 3 and 4): many small models in one pass.

A member is a one-layer, single-head model: fused input ``x`` -> ``x + attention(x)`` -> ``x + MLP(x)`` ->
linear read-out. Its input layer adds or concatenates a token table and a learned position table (or has no
positions), optionally multiplied by a constant ``input_scale`` and followed by a LayerNorm without affine
parameters or by an RMS normalisation (divide by the root mean square, no centring); its attention is causal or not.

To train several seeds and variants in seconds on a loaded CPU, all members live in one :class:`TinyEnsemble`
whose parameters carry a leading member axis ``E``: one forward and one Adam step train every member at once.
Members of different widths are padded to the widest one; masks keep each member's unused coordinates at zero,
so those coordinates never receive a gradient and every member computes exactly what a stand-alone model of its
own width would (``tests/lab/test_training.py`` checks one member against plain torch modules).

Shapes: ``E`` members, ``b`` batch, ``s`` sequence, ``D`` the widest member's width, ``H = 4 D``, ``V`` the
vocabulary, ``n`` the read-out classes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from ..runtime import single_thread

FUSIONS = ("add", "concat", "none")


@dataclass(frozen=True)
class Spec:
    """One member: ``fusion`` ``"add"`` (token and position both ``d_model`` wide), ``"concat"`` (token
    ``d_model - d_position``, position ``d_position``; default half) or ``"none"`` (no positions); a LayerNorm
    after fusing, or ``rms_norm``: dividing by the vector's root mean square instead (no centring); causal
    attention; the ``seed`` of its initialisation and of its data; and ``input_scale``, a constant that multiplies
    the fused vector (before the normalisation, if any): the control for the scale a LayerNorm changes."""

    fusion: str
    d_model: int
    layer_norm: bool = False
    causal: bool = False
    seed: int = 0
    d_position: int | None = None
    input_scale: float = 1.0
    rms_norm: bool = False

    def __post_init__(self):
        if self.layer_norm and self.rms_norm:
            raise ValueError("a member has a LayerNorm or an RMS normalisation, not both")
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, got {self.fusion!r}")
        if self.d_model < 2:
            raise ValueError(f"d_model must be >= 2, got {self.d_model}")
        if not self.input_scale > 0:
            raise ValueError(f"input_scale must be > 0, got {self.input_scale}")
        if self.fusion == "concat" and not 0 < self.widths[1] < self.d_model:
            raise ValueError(f"d_position must be in (0, d_model={self.d_model}) for concat, got {self.d_position}")

    @property
    def widths(self) -> tuple[int, int]:
        """``(token width, position width)``."""
        if self.fusion == "add":
            return self.d_model, self.d_model
        if self.fusion == "none":
            return self.d_model, 0
        d_p = self.d_position or self.d_model // 2
        return self.d_model - d_p, d_p


def parameter_count(spec: Spec, vocab_size: int, max_len: int, n_out: int) -> int:
    """Trainable parameters of one member: tables, four ``d x d`` attention maps, the MLP, the read-out."""
    d, (d_t, d_p), hidden = spec.d_model, spec.widths, 4 * spec.d_model
    return vocab_size * d_t + max_len * d_p + 4 * d * d + 2 * d * hidden + hidden + d + d * n_out + n_out


def matched_concat_width(d_model: int, vocab_size: int, max_len: int, n_out: int) -> int:
    """The even width of a ``concat`` member (half of it position) whose parameter count is closest to an
    ``add`` member of width ``d_model``."""
    target = parameter_count(Spec("add", d_model), vocab_size, max_len, n_out)
    widths = range(d_model, 4 * d_model + 1, 2)
    return min(widths, key=lambda w: abs(parameter_count(Spec("concat", w), vocab_size, max_len, n_out) - target))


class TinyEnsemble(nn.Module):
    """``E`` independent one-layer attention models (one per :class:`Spec`), trained together.

    Initialisation, member by member from ``torch.Generator().manual_seed(spec.seed)``: token rows
    ``N(0, 1/d_t)`` times ``sqrt(d_t)`` in the forward pass (unit RMS, chapter 2's balanced design), position rows
    ``N(0, 1)`` (as large as the tokens), linear maps ``U(+-1/sqrt(fan_in))`` as ``nn.Linear``, biases zero.

    ``forward(ids)``: ids ``(E, b, s)`` -> logits ``(E, b, s, n)``.
    """

    def __init__(self, specs: Sequence[Spec], vocab_size: int, max_len: int, n_out: int):
        super().__init__()
        if not specs:
            raise ValueError("specs must hold at least one Spec")
        self.specs, self.vocab_size, self.max_len, self.n_out = list(specs), vocab_size, max_len, n_out
        E, D = len(specs), max(s.d_model for s in specs)
        H = 4 * D
        masks = torch.zeros(3, E, D)  # token coords, position coords, active coords
        hidden = torch.zeros(E, H)
        for e, s in enumerate(specs):
            d_t, d_p = s.widths
            masks[0, e, :d_t] = 1
            masks[1, e, s.d_model - d_p : s.d_model] = 1
            masks[2, e, : s.d_model] = 1
            hidden[e, : 4 * s.d_model] = 1
        self.register_buffer("token_mask", masks[0])
        self.register_buffer("position_mask", masks[1])
        self.register_buffer("active", masks[2])
        self.register_buffer("hidden_mask", hidden)
        self.register_buffer("layer_norm", torch.tensor([s.layer_norm for s in specs]))
        self.register_buffer("rms_norm", torch.tensor([s.rms_norm for s in specs]))
        self.register_buffer("causal", torch.tensor([s.causal for s in specs]))
        self.register_buffer("input_scale", torch.tensor([s.input_scale for s in specs], dtype=torch.float64))
        self.register_buffer("token_scale", torch.tensor([math.sqrt(s.widths[0]) for s in specs]))
        self.register_buffer("score_scale", torch.tensor([1 / math.sqrt(s.d_model) for s in specs]))
        shapes = {
            "token": (vocab_size, D),
            "position": (max_len, D),
            "wq": (D, D),
            "wk": (D, D),
            "wv": (D, D),
            "wo": (D, D),
            "w1": (D, H),
            "b1": (H,),
            "w2": (H, D),
            "b2": (D,),
            "wout": (D, n_out),
            "bout": (n_out,),
        }
        for name, shape in shapes.items():
            setattr(self, name, nn.Parameter(torch.zeros(E, *shape)))
        with torch.no_grad():
            for e, s in enumerate(specs):
                for name, value in _member_init(s, vocab_size, max_len, n_out).items():
                    getattr(self, name)[e][tuple(slice(0, n) for n in value.shape)] = value

    def member(self, e: int) -> dict[str, torch.Tensor]:
        """Member ``e``'s parameters at its own width (detached copies): ``token`` ``(V, d_t)``, ``position``
        ``(L, d_p)`` (absent for ``"none"``), ``wq wk wv wo`` ``(d, d)``, ``w1`` ``(d, 4d)``, ``b1``, ``w2``,
        ``b2``, ``wout`` ``(d, n)``, ``bout``; a linear map is applied as ``x @ w``."""
        s = self.specs[e]
        d, (d_t, d_p) = s.d_model, s.widths
        out = {"token": self.token[e, :, :d_t]}
        if d_p:
            out["position"] = self.position[e, :, d - d_p : d]
        for name in ("wq", "wk", "wv", "wo"):
            out[name] = getattr(self, name)[e, :d, :d]
        out |= {
            "w1": self.w1[e, :d, : 4 * d],
            "b1": self.b1[e, : 4 * d],
            "w2": self.w2[e, : 4 * d, :d],
            "b2": self.b2[e, :d],
            "wout": self.wout[e, :d],
            "bout": self.bout[e],
        }
        return {k: v.detach().clone() for k, v in out.items()}

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """The fused input ``(E, b, s, D)`` (LayerNorm or RMS normalisation applied for the members that have one)."""
        members = torch.arange(len(self.specs), device=ids.device)[:, None, None]
        x = self.token[members, ids] * (self.token_scale[:, None] * self.token_mask)[:, None, None]
        x = x + self.position[:, None, : ids.shape[-1]] * self.position_mask[:, None, None]
        x = x * self.input_scale[:, None, None, None].to(x.dtype)  # exactly x where the scale is 1
        active, n = self.active[:, None, None], self.active.sum(-1)[:, None, None, None]
        mean = (x * active).sum(-1, keepdim=True) / n
        var = ((x - mean) ** 2 * active).sum(-1, keepdim=True) / n
        normed = (x - mean) / torch.sqrt(var + 1e-5) * active
        rms = x / torch.sqrt((x**2 * active).sum(-1, keepdim=True) / n + 1e-5) * active
        x = torch.where(self.rms_norm[:, None, None, None], rms, x)
        return torch.where(self.layer_norm[:, None, None, None], normed, x)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.dim() != 3 or ids.shape[0] != len(self.specs):
            raise ValueError(f"ids must be (members={len(self.specs)}, batch, seq), got {tuple(ids.shape)}")
        x = self.embed(ids)  # (E, b, s, D)
        q, k, v = (torch.einsum("ebsd,edf->ebsf", x, w) for w in (self.wq, self.wk, self.wv))
        scores = q @ k.transpose(-2, -1) * self.score_scale[:, None, None, None]  # (E, b, s, s)
        s = ids.shape[-1]
        future = torch.ones(s, s, dtype=torch.bool, device=ids.device).triu(1)
        scores = scores.masked_fill(self.causal[:, None, None, None] & future, float("-inf"))
        x = x + torch.einsum("ebsd,edf->ebsf", scores.softmax(-1) @ v, self.wo)
        h = (
            torch.relu(torch.einsum("ebsd,edh->ebsh", x, self.w1) + self.b1[:, None, None])
            * self.hidden_mask[:, None, None]
        )
        x = x + torch.einsum("ebsh,ehd->ebsd", h, self.w2) + self.b2[:, None, None]
        return torch.einsum("ebsd,edn->ebsn", x, self.wout) + self.bout[:, None, None]


def _member_init(spec: Spec, vocab_size: int, max_len: int, n_out: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(spec.seed)
    d, (d_t, d_p) = spec.d_model, spec.widths

    def uniform(fan_in, *shape):
        return (torch.rand(*shape, generator=g) * 2 - 1) / math.sqrt(fan_in)

    init = {"token": torch.randn(vocab_size, d_t, generator=g) / math.sqrt(d_t)}
    position = torch.randn(max_len, d_p, generator=g)
    if d_p:  # a concat member's positions sit in its last d_p coordinates
        init["position"] = torch.cat((torch.zeros(max_len, d - d_p), position), dim=1)
    for name in ("wq", "wk", "wv", "wo"):
        init[name] = uniform(d, d, d)
    return init | {"w1": uniform(d, d, 4 * d), "w2": uniform(4 * d, 4 * d, d), "wout": uniform(d, d, n_out)}


Task = Callable[[int, int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]


def reverse_task(vocab_size: int, seq_len: int) -> Task:
    """Output the sequence reversed: the target at position ``p`` is the token at ``s - 1 - p``. It needs the
    token (what to copy) and the position (where to look). ``task(batch, seed_step, generator)`` -> ``(ids,
    targets)``, both ``(b, s)``."""

    def task(batch, _, generator):
        ids = torch.randint(0, vocab_size, (batch, seq_len), generator=generator)
        return ids, ids.flip(1)

    return task


def position_task(vocab_size: int, seq_len: int, start_token: bool = True) -> Task:
    """Name your own position: random tokens ``1 .. V-1``; the target at ``p`` is ``p``. With ``start_token`` the
    first token is the start token 0, which no other slot holds; without it the first token is as random as the rest.
    """

    def task(batch, _, generator):
        ids = torch.randint(1, vocab_size, (batch, seq_len), generator=generator)
        if start_token:
            ids[:, 0] = 0
        return ids, torch.arange(seq_len).expand(batch, seq_len)

    return task


def _batches(specs, task, batch, step, generators, shared=False):
    if shared:  # one batch per seed, the same for every member with that seed
        drawn = {seed: task(batch, step, generators[seed]) for seed in dict.fromkeys(s.seed for s in specs)}
        pairs = [drawn[s.seed] for s in specs]
    else:
        pairs = [task(batch, step, generators[s.seed]) for s in specs]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])  # (E, b, s) each


def train(
    model: TinyEnsemble,
    task: Task,
    steps: int,
    batch: int = 32,
    lr: float = 3e-3,
    eval_every: int = 25,
    eval_batch: int = 64,
    shared_batches: bool = False,
) -> dict[str, torch.Tensor]:
    """Train every member with Adam on ``task`` (a fresh batch each step), one thread, deterministic.

    Members with the same seed share one data stream, ``Generator().manual_seed(1000 + spec.seed)``, and draw their
    batches from it in turn (member order within a step), so two such members see different batches; with
    ``shared_batches`` they see the same batches (one draw per seed and step) and the same held-out batch, so that a
    comparison between them is not blurred by different data (common random numbers). The loss is
    the sum of the members' mean cross-entropies, so each member's gradient is its own. Every ``eval_every`` steps,
    accuracy (all positions) on a fixed held-out batch per seed is recorded.

    Returns ``steps`` ``(t,)`` and ``accuracy`` ``(t, E)`` (the last row after the final step).
    """
    if steps < 1 or batch < 1 or eval_every < 1:
        raise ValueError(f"steps, batch and eval_every must be >= 1, got {steps}, {batch}, {eval_every}")
    seeds = sorted({s.seed for s in model.specs})
    held_out = _batches(
        model.specs, task, eval_batch, -1, {s: torch.Generator().manual_seed(10_000 + s) for s in seeds}, shared_batches
    )
    generators = {s: torch.Generator().manual_seed(1000 + s) for s in seeds}
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history, accuracy = [], []
    with single_thread():
        for step in range(1, steps + 1):
            ids, targets = _batches(model.specs, task, batch, step, generators, shared_batches)
            logits = model(ids)  # (E, b, s, n)
            loss = (
                F.cross_entropy(logits.flatten(1, 2).transpose(1, 2), targets.flatten(1), reduction="none")
                .mean(-1)
                .sum()
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % eval_every == 0 or step == steps:
                history.append(step)
                accuracy.append(evaluate(model, *held_out))
    return {"steps": torch.tensor(history), "accuracy": torch.stack(accuracy)}


def evaluate(model: TinyEnsemble, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Accuracy of every member over all positions: ids, targets ``(E, b, s)`` -> ``(E,)``."""
    with torch.no_grad():
        return (model(ids).argmax(-1) == targets).double().mean(dim=(1, 2))


def plot_training(
    steps: torch.Tensor,
    accuracy: torch.Tensor,
    groups: dict[str, Sequence[int]],
    chance: float | None = None,
    title: str = "",
):
    """Held-out accuracy against training step: per group of members (seeds), the mean and the min-max band."""
    fig, ax = plt.subplots(figsize=(8, 3.4))
    for label, members in groups.items():
        acc = accuracy[:, list(members)]  # (t, seeds)
        (line,) = ax.plot(steps.numpy(), acc.mean(1).numpy(), lw=1.6, label=f"{label} ({len(members)} seeds)")
        ax.fill_between(
            steps.numpy(), acc.min(1).values.numpy(), acc.max(1).values.numpy(), color=line.get_color(), alpha=0.2, lw=0
        )
    if chance is not None:
        ax.axhline(chance, color="gray", ls=":", lw=1, label="chance")
    ax.set_xlabel("training step")
    ax.set_ylabel("held-out accuracy")
    ax.set_ylim(0, 1.02)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return fig


def plot_training_panels(
    steps: torch.Tensor,
    accuracy: torch.Tensor,
    panels: dict[str, dict[str, Sequence[int]]],
    chance: float | Sequence[float | Mapping[str, float] | None] | None = None,
    title: str = "",
):
    """Like :func:`plot_training`, one panel per entry of ``panels`` (panel title -> groups), sharing the y axis, so
    that overlapping bands of different groups are read side by side instead of on top of each other. ``chance`` is
    one level for every panel or one per panel; a panel's entry may also map labels to levels (several dotted
    lines, e.g. a chance level and a floor)."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.4), sharey=True, squeeze=False)
    levels = [chance] * len(panels) if chance is None or isinstance(chance, (int, float)) else list(chance)
    if len(levels) != len(panels):
        raise ValueError(f"chance must be one level or one per panel ({len(panels)}), got {len(levels)}")
    for ax, (panel, groups), chance in zip(axes[0], panels.items(), levels, strict=True):
        for label, members in groups.items():
            acc = accuracy[:, list(members)]  # (t, seeds)
            (line,) = ax.plot(steps.numpy(), acc.mean(1).numpy(), lw=1.6, label=f"{label} ({len(members)} seeds)")
            low, high = acc.min(1).values.numpy(), acc.max(1).values.numpy()
            ax.fill_between(steps.numpy(), low, high, color=line.get_color(), alpha=0.2, lw=0)
        lines = chance if isinstance(chance, Mapping) else {} if chance is None else {"chance": chance}
        for (label, level), color in zip(lines.items(), ("gray", "black", "tab:brown"), strict=False):
            ax.axhline(level, color=color, ls=":", lw=1, label=label)
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel("training step")
        ax.legend(fontsize=8, loc="upper left")
    axes[0, 0].set_ylabel("held-out accuracy")
    axes[0, 0].set_ylim(0, 1.02)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
