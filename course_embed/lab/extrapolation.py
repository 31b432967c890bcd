"""Chapter 5's length-generalisation study: tiny causal LMs that differ only in their position scheme.

Shapes: ``b`` batch, ``s`` sequence, ``v = 256`` bytes. The model is :class:`~course_embed.lab.decoder.TinyLM`.

**The training** (:func:`train`): windows of the CPython corpus (:mod:`course_embed.lab.corpus`), with a fixed
share of copy-task sequences in every batch, so that the same model can be asked about text, copying and passkey
retrieval. AdamW, linear warm-up, cosine decay to a tenth of the peak rate, gradient clipping at 1.

**The measurements** (:func:`measure`): held-out loss at every evaluation length (non-overlapping windows over
the same bytes), loss against token position at the longest length, copy accuracy with fixed and growing
distances, what the attention heads do on the copy task (:mod:`course_embed.lab.heads`), passkey accuracy (and its
control), and the entropy of attention. :func:`run_task` trains one (model, seed) pair and, for the RoPE model named
in the config, extends it (:func:`extensions`) zero-shot and after a short fine-tune. ``scripts/extrapolation.py``
runs every task and writes the results file.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from ..rotary import yarn_attention_factor
from . import corpus, heads
from .corpus import IGNORE
from .decoder import SCHEMES, TinyLM


@dataclass(frozen=True)
class StudyConfig:
    """Everything that fixes the study's numbers. The defaults are the configuration of the shipped results."""

    train_len: int = 64
    eval_lengths: tuple[int, ...] = (64, 96, 128, 192, 256, 384, 512)
    probe_lengths: tuple[int, ...] = (64, 128, 256, 512)  # copy and passkey tests
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    steps: int = 3000
    batch_size: int = 16
    copy_share: int = 2  # one sequence in copy_share is a copy-task sequence
    lr: float = 3e-3
    warmup: int = 40
    rope_bases: tuple[float, ...] = (10.0, 100.0, 10000.0)
    seeds: tuple[int, ...] = (0, 1, 2)
    eval_tokens: int = 8192
    probe_sequences: int = 32
    extension_base: float = 10000.0
    extension_factor: int = 4
    finetune_steps: int = 60
    finetune_lr: float = 1e-3
    valid_fraction: float = 0.1

    def __post_init__(self):
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 4:
            raise ValueError(
                f"d_model={self.d_model} must split into n_heads={self.n_heads} heads whose width is a multiple of 4"
            )
        if self.train_len not in self.eval_lengths or self.train_len not in self.probe_lengths:
            raise ValueError(f"train_len={self.train_len} must be in eval_lengths and probe_lengths (the 1x point)")
        if self.extension_base not in self.rope_bases:
            raise ValueError(f"extension_base={self.extension_base} must be one of rope_bases {self.rope_bases}")
        if self.extension_factor * self.train_len not in self.eval_lengths:
            raise ValueError(
                f"extension_factor * train_len = {self.extension_factor * self.train_len} must be "
                f"one of eval_lengths {self.eval_lengths} (the fine-tune runs at that length)"
            )
        if self.batch_size % self.extension_factor or self.batch_size < self.copy_share:
            raise ValueError(
                f"batch_size={self.batch_size} must be a multiple of extension_factor and hold at "
                f"least one copy sequence (copy_share={self.copy_share})"
            )

    def models(self) -> list[str]:
        """The model names: one per scheme, RoPE once per base (``"rope-10000"``)."""
        return [
            f"rope-{base:g}" if s == "rope" else s
            for s in SCHEMES
            for base in (self.rope_bases if s == "rope" else (None,))
        ]


def parse_model(name: str) -> tuple[str, float]:
    """``"rope-100"`` -> ``("rope", 100.0)``; other names -> ``(name, 10000.0)``."""
    scheme, _, base = name.partition("-")
    if scheme not in SCHEMES:
        raise ValueError(f"model must be one of {SCHEMES} (RoPE as 'rope-BASE'), got {name!r}")
    return scheme, float(base) if base else 10000.0


def build_model(cfg: StudyConfig, name: str) -> TinyLM:
    scheme, base = parse_model(name)
    return TinyLM(cfg.d_model, cfg.n_heads, cfg.n_layers, scheme, cfg.train_len, rope_base=base)


def mixed_batch(
    text: torch.Tensor, cfg: StudyConfig, batch: int, length: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` sequences of ``length``: text windows, and every ``copy_share``-th one a copy-task sequence."""
    copies = batch // cfg.copy_share
    ids, targets = corpus.text_batch(text, batch - copies, length, generator)
    c_ids, c_targets = corpus.repeat_batch(copies, length, generator)
    return torch.cat((ids, c_ids)), torch.cat((targets, c_targets))


def train(
    model: TinyLM,
    text: torch.Tensor,
    cfg: StudyConfig,
    steps: int,
    length: int,
    batch: int,
    generator: torch.Generator,
    lr: float,
    warmup: int,
) -> list[float]:
    """AdamW on :func:`mixed_batch` batches; linear warm-up, cosine decay to ``lr / 10``. Returns step losses."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)

    def rate(i: int) -> float:
        if i < warmup:
            return (i + 1) / warmup
        return 0.1 + 0.45 * (1 + math.cos(math.pi * (i - warmup) / max(1, steps - warmup)))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    model.train()
    losses = []
    for _ in range(steps):
        ids, targets = mixed_batch(text, cfg, batch, length, generator)
        loss = F.cross_entropy(model(ids).flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def token_losses(model: TinyLM, ids: torch.Tensor, targets: torch.Tensor, batch: int = 32) -> torch.Tensor:
    """Cross-entropy of every target ``(b, s)`` (0 where the target is :data:`IGNORE`), in chunks of ``batch``."""
    model.eval()
    out = []
    for start in range(0, len(ids), batch):
        logits = model(ids[start : start + batch])
        out.append(
            F.cross_entropy(
                logits.transpose(1, 2), targets[start : start + batch], ignore_index=IGNORE, reduction="none"
            )
        )
    return torch.cat(out)


@torch.no_grad()
def accuracy(model: TinyLM, ids: torch.Tensor, targets: torch.Tensor) -> float:
    """Share of the scored targets ``(b, s)`` that the model's top prediction gets right."""
    model.eval()
    keep = targets != IGNORE
    return (model(ids).argmax(-1)[keep] == targets[keep]).float().mean().item()


def _keep_attention(model: TinyLM, keep: bool) -> None:
    for attn in model.attentions():
        attn.keep_entropy, attn.entropy, attn.weights = keep, None, None


def _fits(model: TinyLM, length: int, train_len: int) -> bool:
    return model.scheme != "learned" or length <= train_len  # a learned table has no rows past train_len


def measure(model: TinyLM, valid: torch.Tensor, cfg: StudyConfig, full: bool = True) -> dict:
    """Everything the chapter plots for one model; lists follow ``eval_lengths`` / ``probe_lengths``, with
    ``None`` where the model cannot run (a learned table past its length).

    ``loss``: mean held-out loss (nats per byte). ``passkey`` / ``passkey_control``: digit accuracy with the key
    present / replaced. With ``full``: ``position_loss`` (loss per 16-token bin at the longest length that fits),
    ``copy_fixed`` / ``copy_growing`` (accuracy, periods ``[L/8, L/2]`` / ``[s/8, s/2]``), ``induction`` /
    ``previous`` (per probe length, ``[layer][head]`` weight on the induction targets / previous token in the
    fixed-distance copy rows, :func:`~course_embed.lab.heads.head_roles`) and ``entropy`` (mean attention entropy
    of the last 16 queries, all layers and heads, nats).
    """
    out: dict = {"loss": [], "passkey": [], "passkey_control": []}
    if full:
        out.update(position_loss=None, copy_fixed=[], copy_growing=[], induction=[], previous=[], entropy=[])
    for n in cfg.eval_lengths:
        if not _fits(model, n, cfg.train_len):
            out["loss"].append(None)
            if full:
                out["entropy"].append(None)
            continue
        ids, targets = corpus.eval_windows(valid, n, cfg.eval_tokens)
        losses = token_losses(model, ids, targets)  # (b, s)
        out["loss"].append(losses.mean().item())
        if full:
            out["position_loss"] = losses.mean(0).view(-1, 16).mean(1).tolist()
            _keep_attention(model, True)
            token_losses(model, ids[-8:], targets[-8:])  # one chunk: entropy of the last 8 windows
            out["entropy"].append(torch.stack([a.entropy[:, -16:].mean() for a in model.attentions()]).mean().item())
            _keep_attention(model, False)
    for n in cfg.probe_lengths:
        if not _fits(model, n, cfg.train_len):
            for key in ("passkey", "passkey_control") + (
                ("copy_fixed", "copy_growing", "induction", "previous") if full else ()
            ):
                out[key].append(None)
            continue
        g = torch.Generator().manual_seed(1000 + n)  # the same probes for every model
        out["passkey"].append(accuracy(model, *corpus.passkey_batch(valid, cfg.probe_sequences, n, g)))
        out["passkey_control"].append(
            accuracy(model, *corpus.passkey_batch(valid, cfg.probe_sequences, n, g, control=True))
        )
        if full:
            fixed = corpus.repeat_batch(cfg.probe_sequences, n, g, (cfg.train_len // 8, cfg.train_len // 2))
            _keep_attention(model, True)
            out["copy_fixed"].append(accuracy(model, *fixed))
            roles = [heads.head_roles(a.weights, fixed[0]) for a in model.attentions()]  # per layer: two (h,)
            out["induction"].append([on_target.tolist() for on_target, _ in roles])
            out["previous"].append([on_previous.tolist() for _, on_previous in roles])
            _keep_attention(model, False)
            out["copy_growing"].append(accuracy(model, *corpus.repeat_batch(cfg.probe_sequences, n, g)))
    return out


def extensions(cfg: StudyConfig) -> dict[str, tuple[dict | None, float, bool]]:
    """Extension method -> ``(rope_scaling, logit_scale, fine-tuned too?)`` for ``extension_factor`` ``s``.

    ``linear`` (PI), ``ntk``, ``dynamic`` (HF's formula with ``factor = 1``, so its scale is the current length
    over the training length) and ``yarn`` are the package's; the YaRN ablations split it into its ramp alone
    (``attention_factor = 1``) and its temperature alone (plain RoPE, scores times ``(0.1 ln s + 1)**2``), and
    move its ramp: ``beta_fast = 2`` (default 32) keeps every pair that turns at least twice in ``L``,
    ``beta_slow = 0.1`` (default 1) interpolates fully only the pairs that turn less than a tenth of a turn.
    """
    s, L = float(cfg.extension_factor), cfg.train_len
    temperature = yarn_attention_factor(s) ** 2
    return {
        "none": (None, 1.0, True),
        "linear": ({"rope_type": "linear", "factor": s}, 1.0, True),
        "ntk": ({"rope_type": "ntk", "factor": s}, 1.0, True),
        "dynamic": ({"rope_type": "dynamic", "factor": 1.0, "original_max_position_embeddings": L}, 1.0, True),
        "yarn": ({"rope_type": "yarn", "factor": s, "original_max_position_embeddings": L}, 1.0, True),
        "yarn_ramp_only": (
            {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": L, "attention_factor": 1.0},
            1.0,
            False,
        ),
        "yarn_temperature_only": (None, temperature, False),
        **{
            f"yarn_{name}_{value:g}": (
                {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": L, name: value},
                1.0,
                False,
            )
            for name, value in (("beta_fast", 2.0), ("beta_slow", 0.1))
        },
    }


def run_task(cfg: StudyConfig, name: str, seed: int, text: torch.Tensor, valid: torch.Tensor) -> dict:
    """Train model ``name`` with ``seed`` (initialisation and data order), measure it, and extend it if it is the
    RoPE model with ``extension_base``. Returns a JSON-ready dict."""
    torch.manual_seed(seed)
    model = build_model(cfg, name)
    data = torch.Generator().manual_seed(seed)
    losses = train(model, text, cfg, cfg.steps, cfg.train_len, cfg.batch_size, data, cfg.lr, cfg.warmup)
    window = max(1, cfg.steps // 50)
    result = {
        "model": name,
        "seed": seed,
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_curve": [sum(losses[i : i + window]) / len(losses[i : i + window]) for i in range(0, cfg.steps, window)],
        **measure(model, valid, cfg),
    }
    if name != f"rope-{cfg.extension_base:g}":
        return result
    result["extension"] = {}
    long_len = cfg.extension_factor * cfg.train_len
    for method, (scaling, logit_scale, finetune) in extensions(cfg).items():
        extended = copy.deepcopy(model).set_rope(scaling, logit_scale)
        phases = {"zero_shot": measure(extended, valid, cfg, full=False)}
        if finetune:
            tune = torch.Generator().manual_seed(seed + 10_000)
            train(
                extended,
                text,
                cfg,
                cfg.finetune_steps,
                long_len,
                cfg.batch_size // cfg.extension_factor,
                tune,
                cfg.finetune_lr,
                warmup=cfg.finetune_steps // 10,
            )
            phases["finetuned"] = measure(extended, valid, cfg, full=False)
        result["extension"][method] = phases
    return result


def config_dict(cfg: StudyConfig) -> dict:
    return asdict(cfg)
