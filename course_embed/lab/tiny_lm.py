"""Small training runs for chapter 2: seconds on one CPU thread, seeded, bit-for-bit repeatable.

Chapter 2 trains tiny Transformers (:class:`TinyTransformer`) on a task that needs the position
(:func:`reverse_batch`) under each init x scale combination (:func:`train_reverse`), so the effect of the
``sqrt(d)`` factor after training is measured rather than inferred from initialisation statistics.

Everything runs under :func:`course_embed.single_thread`: with one intra-op thread the order of every floating-point
sum is fixed, so the numbers do not depend on how many cores the machine has.

Shapes: ``b`` batch, ``s`` sequence, ``v`` vocabulary, ``d`` width. Chapter 1's skip-gram table is
:mod:`course_embed.lab.skipgram`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..runtime import single_thread
from ..sinusoidal import sinusoidal_table
from ..token import TokenEmbedding


@dataclass(frozen=True)
class Setting:
    """One way to build the input and output layers of :class:`TinyTransformer`.

    ``init``: the table's init (``"normal"``, ``"xavier_uniform"``, ``"scaled_normal"``); ``scale``: multiply the
    lookup by ``sqrt(d)``; ``tied``: the output layer reuses the table; ``pre_norm``: pre-LN instead of post-LN;
    ``pe_scale``: multiply the sinusoidal table by this (a control that restores the token/position ratio);
    ``score_gain``: multiply the attention scores by this (a control: the scores' spread at step 0 grows by the
    gain, and so, under Adam, does every step's change of the scores);
    ``qk_init``: multiply the query and key projections' initial weights and biases by this (a control that
    de-saturates only the start: the step-0 scores shrink by ``qk_init**2``, later updates do not);
    ``qk_lr``: divide Adam's learning rate for the query and key projections (weights and biases) by this (a
    control: a score is bilinear in the input, so its change per step grows like ``lr * mean(x**2)``; dividing by
    the growth of ``mean(x**2)``, or by ``score_gain``, matches the per-step score change of a smaller input);
    ``tau``: divide the logits by this temperature (a control that shrinks the own-row logit);
    ``copy_head``: untied, with the head initialised as a copy of the table (the tied model's starting logits,
    its own gradients); ``head_like_table``: untied, with the head drawn anew from the table's own init (the
    copy's scale without the copy).
    """

    init: str
    scale: bool
    tied: bool = True
    pre_norm: bool = False
    pe_scale: float = 1.0
    score_gain: float = 1.0
    qk_init: float = 1.0
    qk_lr: float = 1.0
    tau: float = 1.0
    copy_head: bool = False
    head_like_table: bool = False

    def __post_init__(self):
        if self.copy_head and self.tied:
            raise ValueError("copy_head=True needs tied=False: a tied model's head is the table itself")
        if self.head_like_table and self.tied:
            raise ValueError("head_like_table=True needs tied=False: a tied model's head is the table itself")
        if self.copy_head and self.head_like_table:
            raise ValueError("pick one of copy_head and head_like_table: the head is a copy or a new draw")
        if min(self.score_gain, self.tau, self.pe_scale, self.qk_init, self.qk_lr) <= 0:
            raise ValueError(
                "score_gain, tau, pe_scale, qk_init and qk_lr must be positive, "
                f"got {self.score_gain}, {self.tau}, {self.pe_scale}, {self.qk_init}, {self.qk_lr}"
            )


def reverse_batch(batch: int, seq: int, vocab_size: int, generator: torch.Generator):
    """Random ids ``(b, s)`` and the targets of the reverse task: position ``p`` must output token ``s-1-p``.

    The answer at every position depends on the position, so a model that cannot read it is at chance.
    """
    ids = torch.randint(0, vocab_size, (batch, seq), generator=generator)
    return ids, ids.flip(1)


class TinyTransformer(nn.Module):
    """Token embedding (x ``sqrt(d)`` or not) + sinusoidal positions -> one attention layer -> logits.

    ``ids`` ``(b, s)`` -> logits ``(b, s, v)``. One head, no feed-forward net: enough for tasks that route a
    token by its position. Post-LN (the original Transformer) normalises the residual sum,
    ``h = LN(x + attn(x))``; pre-LN normalises the attention's input and then the output,
    ``h = LN_f(x + attn(LN(x)))``, so the embedding's scale is carried along the residual stream. Tied: the
    logits are ``h @ W.T`` with the embedding's own table ``W``; untied: a separate ``nn.Linear(d, v)``.
    Attention is bidirectional (no causal mask): every position may read every other, as the reverse task needs.
    The controls of :class:`Setting` multiply the scores by ``score_gain`` and divide the logits by ``tau``
    (``qk_lr`` acts in :func:`train_reverse`).
    """

    def __init__(self, vocab_size: int, d_model: int, seq: int, setting: Setting):
        super().__init__()
        self.setting = setting
        self.embed = TokenEmbedding(vocab_size, d_model, scale=setting.scale, init=setting.init)
        self.register_buffer("pe", sinusoidal_table(seq, d_model) * setting.pe_scale)
        self.qkv, self.out = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.norm, self.final_norm = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.head = None if setting.tied else nn.Linear(d_model, vocab_size, bias=False)
        if setting.qk_init != 1.0:  # the query and key rows of qkv: step-0 scores times qk_init**2
            with torch.no_grad():
                self.qkv.weight[: 2 * d_model] *= setting.qk_init
                self.qkv.bias[: 2 * d_model] *= setting.qk_init
        if setting.copy_head:
            with torch.no_grad():
                self.head.weight.copy_(self.embed.weight)
        if setting.head_like_table:  # a second, independent draw from the table's init
            with torch.no_grad():
                self.head.weight.copy_(TokenEmbedding(vocab_size, d_model, scale=False, init=setting.init).weight)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.pe[: ids.shape[1]]  # (b, s, d)
        h = self.norm(x) if self.setting.pre_norm else x
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        x = x + self.out(F.scaled_dot_product_attention(q * self.setting.score_gain, k, v))
        h = self.final_norm(x) if self.setting.pre_norm else self.norm(x)
        head = self.embed.weight if self.head is None else self.head.weight
        return h @ head.T / self.setting.tau  # (b, s, v)


def _batched_logits(
    params: dict[str, torch.Tensor],
    ids: torch.Tensor,
    pe: torch.Tensor,
    factor: torch.Tensor,
    pre: torch.Tensor,
    tied: torch.Tensor,
    gain: torch.Tensor,
    tau: torch.Tensor,
) -> torch.Tensor:
    """:meth:`TinyTransformer.forward` for ``r`` models at once; parameters stacked on a leading dim ``r``.

    ids ``(r, b, s)`` -> logits ``(r, b, s, v)``; ``factor`` ``(r, 1, 1, 1)``, ``pre`` ``(r, 1, 1, 1)`` and
    ``tied`` ``(r, 1, 1)`` pick each model's variant; ``gain`` ``(r, 1, 1, 1)`` multiplies its scores and
    ``tau`` ``(r, 1, 1, 1)`` divides its logits.
    """

    def norm(x, name):
        return (
            F.layer_norm(x, x.shape[-1:]) * params[f"{name}.weight"][:, None, None]
            + params[f"{name}.bias"][:, None, None]
        )

    def linear(x, name):  # (r, b, s, i) -> (r, b, s, o) as one batched matmul over r
        y = torch.baddbmm(params[f"{name}.bias"][:, None], x.flatten(1, 2), params[f"{name}.weight"].transpose(1, 2))
        return y.view(*x.shape[:-1], -1)

    table = params["embed.weight"]  # (r, v, d)
    x = table[torch.arange(len(ids))[:, None, None], ids] * factor + pe  # (r, b, s, d); pe (r, 1, s, d)
    h = torch.where(pre, norm(x, "norm"), x)
    q, k, v = linear(h, "qkv").chunk(3, dim=-1)
    x = x + linear(F.scaled_dot_product_attention(q * gain, k, v), "out")
    h = torch.where(pre, norm(x, "final_norm"), norm(x, "norm"))
    head = torch.where(tied, table, params["head.weight"])  # (r, v, d)
    return torch.bmm(h.flatten(1, 2), head.transpose(1, 2)).view(*h.shape[:-1], -1) / tau


@dataclass(frozen=True)
class RunResult:
    """One training run: the held-out loss every ``every`` steps (step 0 first) and the final accuracy."""

    setting: Setting
    seed: int
    losses: tuple[float, ...]
    accuracy: float
    every: int


def train_reverse(
    settings: list[Setting],
    seeds: list[int],
    steps: int = 150,
    vocab_size: int = 32,
    d_model: int = 32,
    seq: int = 8,
    batch: int = 16,
    lr: float = 1e-2,
    every: int = 25,
) -> list[RunResult]:
    """Train one :class:`TinyTransformer` per (setting, seed) on :func:`reverse_batch`; Adam, one thread.

    Model ``(setting, seed)`` is initialised after ``torch.manual_seed(seed)`` and trained on the batches of
    ``torch.Generator().manual_seed(seed)``, so every setting sees the same data for a given seed. All models are
    trained together, their parameters stacked on a leading dimension: Adam is element-wise and each model's
    loss depends only on its own parameters, so this is the same computation as separate runs, at the per-step
    overhead of one (tests compare it with a plain loop). The held-out batch (512 sequences, seed 10_000) is
    the same for every run.

    Returns:
        one :class:`RunResult` per (setting, seed), settings outer: held-out cross-entropy at steps
        ``0, every, ..., steps`` and the held-out per-token accuracy at the end (chance ``1 / vocab_size``).
    """
    if steps % every:
        raise ValueError(f"steps={steps} must be a multiple of every={every}")
    if not settings or not seeds:
        raise ValueError("pass at least one setting and one seed")
    runs = [(setting, seed) for setting in settings for seed in seeds]
    test_ids, test_targets = reverse_batch(512, seq, vocab_size, torch.Generator().manual_seed(10_000))
    with single_thread():
        models = []
        for setting, seed in runs:
            torch.manual_seed(seed)
            models.append(TinyTransformer(vocab_size, d_model, seq, setting))
        zero_head = torch.zeros(vocab_size, d_model)
        params = {
            name: nn.Parameter(torch.stack([dict(m.named_parameters()).get(name, zero_head).detach() for m in models]))
            for name in dict(models[-1].named_parameters()) | {"head.weight": None}
        }
        pe = torch.stack([m.pe for m in models])[:, None]  # (r, 1, s, d)
        factor = torch.tensor([m.embed.multiplier for m in models]).view(-1, 1, 1, 1)
        pre = torch.tensor([s.pre_norm for s, _ in runs]).view(-1, 1, 1, 1)
        tied = torch.tensor([s.tied for s, _ in runs]).view(-1, 1, 1)
        gain = torch.tensor([s.score_gain for s, _ in runs]).view(-1, 1, 1, 1)
        # qk_lr: each model's step on the query and key rows of qkv is divided by it after Adam's step, which is
        # Adam with that row's learning rate divided (Adam's step does not depend on the parameter's value)
        qk_rows = torch.ones(len(runs), 3 * d_model)
        qk_rows[:, : 2 * d_model] = torch.tensor([1 / s.qk_lr for s, _ in runs])[:, None]
        slowed = any(s.qk_lr != 1.0 for s, _ in runs)
        tau = torch.tensor([s.tau for s, _ in runs]).view(-1, 1, 1, 1)
        generators = {seed: torch.Generator().manual_seed(seed) for seed in seeds}
        opt = torch.optim.Adam(params.values(), lr=lr)

        def losses_of(ids, targets):
            logits = _batched_logits(params, ids, pe, factor, pre, tied, gain, tau)  # (r, b, s, v)
            per_token = F.cross_entropy(logits.flatten(0, 2), targets.flatten(), reduction="none")
            return per_token.view(len(runs), -1).mean(dim=1), logits

        def held_out():
            with torch.no_grad():
                ids = test_ids.expand(len(runs), -1, -1)
                loss, logits = losses_of(ids, test_targets.expand_as(ids))
            return loss, (logits.argmax(-1) == test_targets).double().flatten(1).mean(dim=1)

        history = [held_out()[0]]
        for step in range(1, steps + 1):
            drawn = {seed: reverse_batch(batch, seq, vocab_size, g) for seed, g in generators.items()}
            ids = torch.stack([drawn[seed][0] for _, seed in runs])
            targets = torch.stack([drawn[seed][1] for _, seed in runs])
            loss = losses_of(ids, targets)[0].sum()  # each model's gradient comes from its own loss only
            opt.zero_grad()
            loss.backward()
            if slowed:
                before = {name: params[name].detach().clone() for name in ("qkv.weight", "qkv.bias")}
            opt.step()
            if slowed:
                with torch.no_grad():
                    for name, old in before.items():
                        rows = qk_rows if name == "qkv.bias" else qk_rows[:, :, None]
                        new = params[name]  # other rows and models keep Adam's step bit for bit
                        new.copy_(torch.where(rows != 1, old + (new - old) * rows, new))
            if step % every == 0:
                history.append(held_out()[0])
        accuracy = held_out()[1]
    curves = torch.stack(history, dim=1)  # (r, points)
    return [
        RunResult(setting, seed, tuple(curves[i].tolist()), accuracy[i].item(), every)
        for i, (setting, seed) in enumerate(runs)
    ]


# --- chapter 2's recorded results ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """One setting's accuracy over its seeds (mean, min, max) and its mean held-out loss at step 0; a recorded
    summary also holds each seed's accuracy and held-out loss curve (seeds in the group's order)."""

    mean: float
    min: float
    max: float
    loss0: float
    accuracies: tuple[float, ...] = ()
    curves: tuple[tuple[float, ...], ...] = ()

    def tolerance(self) -> float:
        """How far a re-run's mean may move: 0.05, or half the seed range when seeds disagree more than that."""
        return max(0.05, (self.max - self.min) / 2)

    @property
    def sd(self) -> float:
        """The sample standard deviation of the seeds' accuracies (needs at least two)."""
        n = len(self.accuracies)
        if n < 2:
            raise ValueError(f"sd needs at least two recorded accuracies, this summary has {n}")
        return (sum((a - self.mean) ** 2 for a in self.accuracies) / (n - 1)) ** 0.5


def summarise(runs: list[RunResult]) -> dict[Setting, Summary]:
    """The runs of :func:`train_reverse` grouped by setting (in the order given), as :class:`Summary`."""
    by_setting: dict[Setting, list[RunResult]] = {}
    for r in runs:
        by_setting.setdefault(r.setting, []).append(r)
    return {
        s: Summary(
            sum(r.accuracy for r in rs) / len(rs),
            min(r.accuracy for r in rs),
            max(r.accuracy for r in rs),
            sum(r.losses[0] for r in rs) / len(rs),
            tuple(r.accuracy for r in rs),
            tuple(r.losses for r in rs),
        )
        for s, rs in by_setting.items()
    }


@dataclass(frozen=True)
class Group:
    """A recorded group of runs: :func:`train_reverse` with these ``steps``, ``lr`` and ``seeds``, summarised;
    ``every``: the steps between two points of a recorded loss curve."""

    steps: int
    lr: float
    seeds: tuple[int, ...]
    summaries: dict[Setting, Summary]
    every: int = 25

    def rerun(self) -> list[RunResult]:
        """Train the group's settings again, exactly as recorded."""
        return train_reverse(list(self.summaries), list(self.seeds), steps=self.steps, lr=self.lr, every=self.every)


def write_record(path, groups: dict[str, tuple[int, float, list[RunResult]]]) -> None:
    """Store each named group ``(steps, lr, runs)`` of :func:`train_reverse` runs as JSON at ``path``: its seeds
    and, per setting, each seed's accuracy and held-out loss curve (4 decimals)."""
    out = {}
    for name, (steps, lr, runs) in groups.items():
        seeds = sorted({r.seed for r in runs})
        by_setting: dict[Setting, dict[int, RunResult]] = {}
        for r in runs:
            by_setting.setdefault(r.setting, {})[r.seed] = r
        entries = [
            {
                "setting": vars(s),
                "accuracy": [round(rs[k].accuracy, 4) for k in seeds],
                "losses": [[round(v, 4) for v in rs[k].losses] for k in seeds],
            }
            for s, rs in by_setting.items()
        ]
        out[name] = {"steps": steps, "lr": lr, "seeds": seeds, "every": runs[0].every, "runs": entries}
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


def read_record(path) -> dict[str, Group]:
    """The groups written by :func:`write_record`, by name, settings in the stored order."""
    with open(path) as f:
        raw = json.load(f)
    groups = {}
    for name, g in raw.items():
        summaries = {}
        for e in g["runs"]:
            acc, curves = tuple(e["accuracy"]), tuple(tuple(c) for c in e["losses"])
            summaries[Setting(**e["setting"])] = Summary(
                sum(acc) / len(acc), min(acc), max(acc), sum(c[0] for c in curves) / len(curves), acc, curves
            )
        groups[name] = Group(g["steps"], g["lr"], tuple(g["seeds"]), summaries, g["every"])
    return groups


def check_record(group: Group, runs: list[RunResult]) -> None:
    """Raise ``ValueError`` unless ``runs`` cover the group's settings and every mean accuracy lies within the
    recorded one's :meth:`Summary.tolerance` (and the step-0 loss within 1%)."""
    recorded = group.summaries
    live = summarise(runs)
    if set(live) != set(recorded):
        raise ValueError(
            f"runs must cover exactly the recorded settings; missing {set(recorded) - set(live)}, "
            f"extra {set(live) - set(recorded)}"
        )
    for s, want in recorded.items():
        got = live[s]
        if abs(got.mean - want.mean) > want.tolerance() or abs(got.loss0 - want.loss0) > 0.01 * want.loss0:
            raise ValueError(
                f"{s}: re-run gives accuracy {got.mean:.4f} and step-0 loss {got.loss0:.4f}, "
                f"recorded {want.mean:.4f} (tolerance {want.tolerance():.2f}) and {want.loss0:.4f}; "
                "re-record with write_record if the model or the task changed"
            )
