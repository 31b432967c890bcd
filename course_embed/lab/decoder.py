"""The small decoder-only language model of chapter 5's study, whose position scheme is one argument.

Shapes: ``b`` batch, ``s`` sequence, ``d`` model width, ``h`` heads, ``h_d = d / h`` head dim, ``v = 256`` bytes.

:class:`TinyLM`: token embedding, optional absolute positions at the input (sinusoidal or learned, via
:class:`~course_embed.fusion.TransformerEmbedding`), pre-LayerNorm blocks whose attention applies the scheme (RoPE to
q and k; ALiBi's key-only bias or one T5 bias table shared by all layers added to the scores; nothing for NoPE), and a
tied output layer. ``logit_scale`` multiplies every attention score (an attention temperature).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..alibi import alibi_bias, alibi_slopes
from ..fusion import TransformerEmbedding
from ..relative import RelativePositionBias
from ..rotary import RotaryEmbedding
from .corpus import VOCAB_SIZE

SCHEMES: tuple[str, ...] = ("nope", "sinusoidal", "learned", "rope", "alibi", "t5")


class Attention(nn.Module):
    """Causal multi-head self-attention with a pluggable position scheme; ``(b, s, d) -> (b, s, d)``.

    ``entropy`` is ``None``, or after a forward with ``keep_entropy`` set, the attention entropy in nats per
    query, averaged over the batch: ``(h, s)``; ``weights`` likewise keeps the attention weights ``(b, h, s, s)``.
    """

    def __init__(
        self, d_model: int, n_heads: int, scheme: str, rope_base: float = 10000.0, rope_scaling: dict | None = None
    ):
        super().__init__()
        self.n_heads, self.head_dim, self.scheme = n_heads, d_model // n_heads, scheme
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.rope = RotaryEmbedding(self.head_dim, rope_base, rope_scaling=rope_scaling) if scheme == "rope" else None
        if scheme == "alibi":
            self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)
        self.logit_scale, self.keep_entropy, self.entropy, self.weights = 1.0, False, None, None

    def forward(self, x: torch.Tensor, t5_bias: torch.Tensor | None = None) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, s, h_d)
        if self.rope is not None:
            q, k = self.rope(q, k)
        scores = q @ k.transpose(-1, -2) * (self.logit_scale / math.sqrt(self.head_dim))  # (b, h, s, s)
        if self.scheme == "alibi":
            scores = scores + alibi_bias(self.slopes, s)  # (h, 1, s), broadcast over queries
        elif t5_bias is not None:
            scores = scores + t5_bias  # (h, s, s)
        future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        if self.keep_entropy:
            self.entropy = -torch.special.xlogy(weights, weights).sum(-1).mean(0)  # (h, s)
            self.weights = weights
        return self.out((weights @ v).transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    """Pre-LayerNorm block: ``x + attn(ln(x))``, then ``x + mlp(ln(x))``; ``(b, s, d) -> (b, s, d)``."""

    def __init__(self, d_model: int, n_heads: int, scheme: str, rope_base: float, rope_scaling: dict | None):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads, scheme, rope_base, rope_scaling)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, t5_bias: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), t5_bias)
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    """A small decoder-only language model whose position scheme is one argument.

    Args:
        d_model, n_heads, n_layers: sizes (the vocabulary is the 256 byte values).
        scheme: one of :data:`SCHEMES`. ``"sinusoidal"`` and ``"learned"`` add a position vector to the token
            embedding; ``"rope"``, ``"alibi"`` and ``"t5"`` act inside attention; ``"nope"`` has no positions.
        max_len: rows of the learned table (the training length; longer inputs are an error).
        rope_base: RoPE's ``base``; rope_scaling: its context extension (:func:`~course_embed.rotary.rope_parameters`).

    Shapes:
        ``forward(ids)``: ``(b, s)`` -> logits ``(b, s, 256)``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_layers: int,
        scheme: str,
        max_len: int,
        rope_base: float = 10000.0,
        rope_scaling: dict | None = None,
    ):
        super().__init__()
        if scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
        self.scheme, self.rope_base = scheme, rope_base
        absolute = scheme if scheme in ("sinusoidal", "learned") else None
        self.embed = TransformerEmbedding(VOCAB_SIZE, d_model, position=absolute, dropout=0.0, max_len=max_len)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, scheme, rope_base, rope_scaling) for _ in range(n_layers))
        self.t5 = RelativePositionBias(n_heads, bidirectional=False) if scheme == "t5" else None  # shared, as in T5
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB_SIZE, bias=False)
        self.head.weight = self.embed.token.weight  # tied

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        t5_bias = self.t5(ids.shape[1], ids.shape[1]) if self.t5 is not None else None
        for block in self.blocks:
            h = block(h, t5_bias)
        return self.head(self.ln(h))

    def attentions(self) -> list[Attention]:
        return [block.attn for block in self.blocks]

    def set_rope(self, rope_scaling: dict | None, logit_scale: float = 1.0) -> TinyLM:
        """Give every layer a RoPE with ``rope_scaling`` and scores times ``logit_scale``; weights unchanged."""
        if self.scheme != "rope":
            raise ValueError(f"set_rope needs a RoPE model, this one uses {self.scheme!r}")
        for attn in self.attentions():
            attn.rope = RotaryEmbedding(attn.head_dim, self.rope_base, rope_scaling=rope_scaling)
            attn.logit_scale = logit_scale
        return self
