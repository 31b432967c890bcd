"""Chapter 1, token embedding: initialisation statistics and parameter counts of published models.

Shapes: ``v`` vocabulary size, ``d`` model width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def init_std(init: str, vocab_size: int, d_model: int) -> float:
    """Closed-form standard deviation of a freshly initialised ``(v, d)`` table.

    ``"normal"`` (``nn.Embedding``'s default) is N(0, 1); ``"xavier_uniform"`` is U(±a) with
    ``a = sqrt(6 / (v + d))``, std ``a / sqrt(3) = sqrt(2 / (v + d))``; ``"scaled_normal"`` is N(0, d**-0.5).
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
