"""Length extrapolation: tiny causal Transformers that differ only in their position scheme.

Shapes: ``b`` batch, ``s`` sequence, ``d`` model width, ``h`` heads, ``h_d = d / h`` head dim, ``v`` vocabulary.

**The task: continue a repeated block.** Each sequence is a block of ``p`` distinct random tokens repeated until
the sequence is full, with the period ``p`` drawn uniformly from ``[s/8, s/2]``. The first block is noise; every
later token equals the token ``p`` positions back, so a model that finds the previous occurrence of the current
token and copies its successor (an *induction head*) predicts it exactly. The period scales with the length, so a
model trained at length ``L`` meets both positions and copy distances it never saw when evaluated at ``2L .. 8L``.
Loss and accuracy count the predictable targets only.

**The model** (:class:`TinyCausalLM`): token embedding, optional absolute positions at the input (sinusoidal or
learned, via :class:`~course_embed.fusion.TransformerEmbedding`), pre-LayerNorm blocks whose attention applies
the scheme (RoPE to q and k; ALiBi or T5 bias added to the scores), and a tied output layer. Schemes share the
data, the number of steps, the optimiser and the seed.

:func:`run_experiment` trains one model per scheme, evaluates it at every length, then extends the RoPE model with
position interpolation, NTK and YaRN (:mod:`course_embed.rotary`), without and with a short fine-tune at the
target length; ``scripts/extrapolation.py`` runs it and writes the JSON the chapter plots.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from ..alibi import alibi_bias, alibi_slopes
from ..fusion import TransformerEmbedding
from ..relative import RelativePositionBias
from ..rotary import RotaryEmbedding

SCHEMES: tuple[str, ...] = ("sinusoidal", "learned", "rope", "alibi", "t5")
EXTENSIONS: tuple[str, ...] = ("none", "linear", "ntk", "yarn")
IGNORE = -100  # target id that the loss and the accuracy skip (the unpredictable first block)


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything that fixes the experiment's numbers. The defaults are the configuration of the shipped results."""

    vocab_size: int = 256
    train_len: int = 64
    eval_factors: tuple[int, ...] = (1, 2, 4, 8)
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    steps: int = 2000
    batch_size: int = 32
    lr: float = 2e-3
    warmup: int = 100
    eval_sequences: int = 128
    eval_batch_size: int = 32
    extension_factor: int = 4
    finetune_steps: int = 200
    finetune_lr: float = 5e-4
    seed: int = 0
    schemes: tuple[str, ...] = SCHEMES
    extensions: tuple[str, ...] = EXTENSIONS

    def __post_init__(self):
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(f"d_model={self.d_model} must split into n_heads={self.n_heads} heads of even width")
        if self.train_len < 16 or self.train_len % 8:
            raise ValueError(f"train_len must be a multiple of 8 and >= 16, got {self.train_len}")
        if self.vocab_size < max(self.eval_factors) * self.train_len // 2:
            raise ValueError(f"vocab_size={self.vocab_size} cannot fill a block of {max(self.eval_factors)} * "
                             f"train_len / 2 distinct tokens; raise vocab_size or lower eval_factors")
        unknown = set(self.schemes) - set(SCHEMES) | set(self.extensions) - set(EXTENSIONS)
        if unknown:
            raise ValueError(f"unknown schemes or extensions {sorted(unknown)}; use {SCHEMES} and {EXTENSIONS}")
        if self.extension_factor not in self.eval_factors:
            raise ValueError(f"extension_factor={self.extension_factor} must be one of eval_factors "
                             f"{self.eval_factors} (the fine-tune runs at that length)")


def repeat_batch(batch: int, length: int, vocab_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of the repeated-block task: ids ``(b, s)`` and next-token targets ``(b, s)``.

    Sequence ``n`` repeats a block of ``p_n`` distinct tokens, ``p_n`` uniform in ``[s/8, s/2]``. ``targets[n, t]`` is
    ``ids[n, t + 1]`` where that token is predictable (``t + 1 >= p_n``) and :data:`IGNORE` elsewhere. CPU tensors;
    the same generator state gives the same batch.
    """
    if length < 16 or length % 8:
        raise ValueError(f"length must be a multiple of 8 and >= 16, got {length}")
    if vocab_size < length // 2:
        raise ValueError(f"vocab_size={vocab_size} is too small for blocks of up to {length // 2} distinct tokens")
    periods = torch.randint(length // 8, length // 2 + 1, (batch,), generator=generator)
    blocks = torch.rand(batch, vocab_size, generator=generator).argsort(dim=1)  # a random permutation per row
    t = torch.arange(length)
    ids = blocks.gather(1, t[None, :] % periods[:, None])  # (b, s)
    targets = torch.full_like(ids, IGNORE)
    targets[:, :-1] = torch.where(t[None, 1:] >= periods[:, None], ids[:, 1:], IGNORE)
    return ids, targets


class Attention(nn.Module):
    """Causal multi-head self-attention with a pluggable position scheme.

    ``position`` is ``"rope"`` (q and k rotated by a :class:`~course_embed.rotary.RotaryEmbedding`, interleaved
    layout), ``"alibi"`` (key-only ALiBi bias, ``(h, 1, s)``), ``"t5"`` (causal T5 bias, ``(h, s, s)``) or anything
    else for none. ``forward``: ``(b, s, d) -> (b, s, d)``.
    """

    def __init__(self, d_model: int, n_heads: int, position: str, rope_scaling: dict | None = None):
        super().__init__()
        self.n_heads, self.head_dim, self.position = n_heads, d_model // n_heads, position
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.rope = RotaryEmbedding(self.head_dim, rope_scaling=rope_scaling) if position == "rope" else None
        self.t5 = RelativePositionBias(n_heads, bidirectional=False) if position == "t5" else None
        if position == "alibi":
            self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, s, h_d) each
        if self.rope is not None:
            q, k = self.rope(q, k)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (b, h, s, s)
        if self.position == "alibi":
            scores = scores + alibi_bias(self.slopes, s)  # (h, 1, s): broadcast over queries, never (h, s, s)
        elif self.t5 is not None:
            scores = scores + self.t5(s, s)
        future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        return self.out((weights @ v).transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    """Pre-LayerNorm Transformer block: ``x + attn(ln(x))``, then ``x + mlp(ln(x))``; ``(b, s, d) -> (b, s, d)``."""

    def __init__(self, d_model: int, n_heads: int, position: str, rope_scaling: dict | None = None):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads, position, rope_scaling)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyCausalLM(nn.Module):
    """A small decoder-only language model whose position scheme is one argument.

    Args:
        vocab_size, d_model, n_heads, n_layers: sizes.
        position: one of :data:`SCHEMES`. ``"sinusoidal"`` and ``"learned"`` add a position vector to the token
            embedding; the others act inside attention and add nothing at the input.
        max_len: rows of the learned table (the training length); resize it with :meth:`resize_positions`.
        rope_scaling: context extension for ``"rope"``, see :func:`course_embed.rotary.rope_parameters`.

    Shapes:
        ``forward(ids)``: ``(b, s)`` -> logits ``(b, s, v)``.
    """

    def __init__(self, vocab_size: int, d_model: int, n_heads: int, n_layers: int, position: str, max_len: int,
                 rope_scaling: dict | None = None):
        super().__init__()
        if position not in SCHEMES:
            raise ValueError(f"position must be one of {SCHEMES}, got {position!r}")
        if rope_scaling is not None and position != "rope":
            raise ValueError(f"rope_scaling applies to position='rope' only, got position={position!r}")
        self.position = position
        absolute = position if position in ("sinusoidal", "learned") else None
        self.embed = TransformerEmbedding(vocab_size, d_model, position=absolute, dropout=0.0, max_len=max_len)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, position, rope_scaling) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.embed.token.weight  # tied

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln(h))

    def set_rope_scaling(self, rope_scaling: dict | None) -> "TinyCausalLM":
        """Replace the RoPE of every layer by one with ``rope_scaling`` (weights unchanged); returns ``self``."""
        if self.position != "rope":
            raise ValueError(f"set_rope_scaling needs a RoPE model, this one uses {self.position!r}")
        for block in self.blocks:
            block.attn.rope = RotaryEmbedding(block.attn.head_dim, rope_scaling=rope_scaling)
        return self

    def resize_positions(self, new_len: int) -> "TinyCausalLM":
        """Interpolate a learned position table to ``new_len`` rows (see ``LearnedPositionalEmbedding.resize``)."""
        if self.position != "learned":
            raise ValueError(f"resize_positions needs a learned-position model, this one uses {self.position!r}")
        self.embed.positions.resize(new_len)
        return self


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the predictable targets: logits ``(b, s, v)``, targets ``(b, s)``."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


def train(model: TinyCausalLM, steps: int, length: int, batch_size: int, generator: torch.Generator, *,
          lr: float = 3e-3, warmup: int = 0, progress: bool = True, desc: str = "train") -> list[float]:
    """Train with AdamW on fresh repeated-block batches; returns the step losses.

    The learning rate warms up linearly over ``warmup`` steps and then stays constant: the task is learned in a
    sudden drop of the loss (the induction head forming), whose timing a decaying rate would push back.
    """
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / max(warmup, 1)))
    vocab = model.head.weight.shape[0]
    model.train()
    losses = []
    for _ in tqdm(range(steps), desc=desc, disable=not progress, leave=False):
        ids, targets = repeat_batch(batch_size, length, vocab, generator)
        loss = sequence_loss(model(ids.to(device)), targets.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def evaluate(model: TinyCausalLM, length: int, sequences: int, batch_size: int, seed: int) -> dict[str, float]:
    """Loss and accuracy on the predictable targets of ``sequences`` held-out sequences of ``length`` tokens.

    The evaluation data depend on ``seed`` and ``length`` only, so every model sees the same sequences.
    """
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed * 1_000_003 + length)
    vocab = model.head.weight.shape[0]
    model.eval()
    all_ids, all_targets = repeat_batch(sequences, length, vocab, generator)
    total_loss, correct, count = 0.0, 0, 0
    for start in range(0, sequences, batch_size):
        ids, targets = all_ids[start:start + batch_size].to(device), all_targets[start:start + batch_size].to(device)
        logits = model(ids)
        keep = targets != IGNORE
        total_loss += F.cross_entropy(logits[keep], targets[keep], reduction="sum").item()
        correct += (logits[keep].argmax(-1) == targets[keep]).sum().item()
        count += keep.sum().item()
    return {"loss": total_loss / count, "accuracy": correct / count}


def _at_length(model: TinyCausalLM, length: int, train_len: int) -> TinyCausalLM:
    """The model to evaluate at ``length``: a learned table is interpolated to it (a copy), others run as they are."""
    if model.position == "learned" and length > train_len:
        return copy.deepcopy(model).resize_positions(length)
    return model


def rope_scaling_for(extension: str, factor: int, original: int) -> dict | None:
    """The ``rope_scaling`` dict of an extension method: ``"none"``, ``"linear"``, ``"ntk"`` or ``"yarn"``."""
    if extension == "none":
        return None
    scaling = {"rope_type": extension, "factor": float(factor)}
    if extension == "yarn":
        scaling["original_max_position_embeddings"] = original
    return scaling


@dataclass
class Results:
    """What :func:`run_experiment` measured; ``to_dict`` is what the script writes as JSON.

    ``schemes[scheme]`` and ``extension[method][phase]`` hold one ``{"loss", "accuracy"}`` per length of
    ``lengths``; ``train_loss`` is the mean loss of the last 50 training steps and ``curves`` the training loss
    averaged over windows of ``steps // 100`` steps.
    """

    config: dict
    lengths: list[int]
    schemes: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    train_loss: dict[str, float] = field(default_factory=dict)
    curves: dict[str, list[float]] = field(default_factory=dict)
    extension: dict[str, dict[str, list[dict[str, float]]]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def run_experiment(cfg: ExperimentConfig, *, progress: bool = True, device=None) -> Results:
    """Train every scheme of ``cfg``, evaluate it at every length, then extend the RoPE model.

    Extension: for each method of ``cfg.extensions`` the trained RoPE model gets ``factor = extension_factor``
    and is evaluated as is (``"zero_shot"``) and after ``finetune_steps`` steps at ``extension_factor * train_len``
    tokens with the same number of tokens per step (``"finetuned"``). ``"none"`` is plain RoPE, so its fine-tuned
    row shows what training at the longer length alone buys.
    """
    device = torch.device(device or "cpu")
    lengths = [f * cfg.train_len for f in cfg.eval_factors]
    results = Results(config=asdict(cfg), lengths=lengths)
    trained = {}
    for scheme in cfg.schemes:
        torch.manual_seed(cfg.seed)
        model = TinyCausalLM(cfg.vocab_size, cfg.d_model, cfg.n_heads, cfg.n_layers, scheme, cfg.train_len).to(device)
        data = torch.Generator().manual_seed(cfg.seed)
        losses = train(model, cfg.steps, cfg.train_len, cfg.batch_size, data, lr=cfg.lr, warmup=cfg.warmup,
                       progress=progress, desc=scheme)
        results.train_loss[scheme] = sum(losses[-50:]) / len(losses[-50:])
        window = max(1, cfg.steps // 100)
        results.curves[scheme] = [sum(losses[i:i + window]) / len(losses[i:i + window])
                                  for i in range(0, cfg.steps, window)]
        results.schemes[scheme] = [
            evaluate(_at_length(model, n, cfg.train_len), n, cfg.eval_sequences, cfg.eval_batch_size, cfg.seed)
            for n in lengths]
        trained[scheme] = model
    if "rope" not in trained:
        return results
    long_len = cfg.extension_factor * cfg.train_len
    for extension in cfg.extensions:
        scaling = rope_scaling_for(extension, cfg.extension_factor, cfg.train_len)
        model = copy.deepcopy(trained["rope"]).set_rope_scaling(scaling)
        zero_shot = [evaluate(model, n, cfg.eval_sequences, cfg.eval_batch_size, cfg.seed) for n in lengths]
        data = torch.Generator().manual_seed(cfg.seed + 1)
        batch = max(1, cfg.batch_size // cfg.extension_factor)
        train(model, cfg.finetune_steps, long_len, batch, data, lr=cfg.finetune_lr, progress=progress,
              desc=f"fine-tune {extension}")
        finetuned = [evaluate(model, n, cfg.eval_sequences, cfg.eval_batch_size, cfg.seed) for n in lengths]
        results.extension[extension] = {"zero_shot": zero_shot, "finetuned": finetuned}
    return results
