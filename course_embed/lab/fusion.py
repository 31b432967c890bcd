"""Chapter 4, fusion: add vs concat costs, probes, shared gradients, dropout, LayerNorm balance, pad influence,
multilingual tables, and figures.

Shapes: ``b`` batch, ``s`` sequence, ``d`` model width, ``v`` vocabulary size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..fusion import TransformerEmbedding
from .probe import lda_predict, lda_probe
from .token_embedding import ModelConfig, parameter_count


def max_abs_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b|`` over all elements, computed in float64; ``a`` and ``b`` must broadcast."""
    return (a.detach().double() - b.detach().double().to(a.device)).abs().max().item()


def fusion_costs(
    vocab_size: int, d_model: int, d_position: int, max_len: int, n_layers: int, d_ff: int, seq_len: int
) -> dict[str, dict[str, int]]:
    """Parameters and forward FLOPs per token of three ways to combine a token table with a position table.

    * ``"add"``: token ``(V, d)`` + positions ``(L, d)``; the model is ``d`` wide.
    * ``"concat"``: the same width ``d``, split: token ``(V, d - d_p)`` and positions ``(L, d_p)`` side by side.
    * ``"concat_wider"``: keep the token width ``d`` and append ``d_p`` position features; every layer is then
      ``d + d_p`` wide.

    ``max_len`` is the number of rows of a learned position table (0 for sinusoidal positions, which have no
    parameters). Layers are GPT-style blocks with biases and two LayerNorms (``parameter_count``'s ``"layers"``),
    ``d_ff`` wide in the feed-forward part whatever the model width. For each variant the dict holds ``token``,
    ``position``, ``embedding`` (their sum), ``layers``, ``width``, ``fuse_flops`` (per token: ``d`` additions for
    ``"add"``, none for a concatenation) and ``layer_flops``: per token, ``2 * layers + 2 * n_layers * seq_len *
    width`` (Kaplan et al., 2020: two FLOPs per weight, plus attention over ``seq_len`` positions).
    """
    if not 0 < d_position < d_model:
        raise ValueError(f"d_position must be in (0, d_model={d_model}), got {d_position}")
    if max_len < 0:
        raise ValueError(f"max_len must be >= 0 (0 for sinusoidal positions), got {max_len}")
    variants = {
        "add": (d_model, d_model, d_model),
        "concat": (d_model - d_position, d_position, d_model),
        "concat_wider": (d_model, d_position, d_model + d_position),
    }
    costs = {}
    for name, (d_token, d_pos, width) in variants.items():
        layers = parameter_count(ModelConfig(name, vocab_size, width, n_layers, d_ff))["layers"]
        costs[name] = {
            "token": vocab_size * d_token,
            "position": max_len * d_pos,
            "embedding": vocab_size * d_token + max_len * d_pos,
            "layers": layers,
            "width": width,
            "fuse_flops": d_model if name == "add" else 0,
            "layer_flops": 2 * layers + 2 * n_layers * seq_len * width,
        }
    return costs


def expected_abs_cosine(d_model: int) -> float:
    """Exact ``E|cos|`` between a fixed vector and a uniformly random direction in ``R^d``.

    ``Gamma(d/2) / (sqrt(pi) Gamma((d + 1)/2))``, about ``sqrt(2 / (pi d))`` for large ``d``: two random vectors
    are nearly orthogonal in high dimension, which is why a sum can keep both.
    """
    if d_model < 1:
        raise ValueError(f"d_model must be a positive integer, got {d_model}")
    return math.exp(math.lgamma(d_model / 2) - math.lgamma((d_model + 1) / 2)) / math.sqrt(math.pi)


def mean_abs_cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean of ``|cos(a_i, b_i)|`` over pairs of rows, in float64; ``a`` and ``b`` are ``(..., d)`` and broadcast."""
    a, b = torch.broadcast_tensors(a.detach().double(), b.detach().double().to(a.device))
    return torch.nn.functional.cosine_similarity(a, b, dim=-1).abs().mean().item()


def fusion_probe(model: TransformerEmbedding, batch: int, seq_len: int, generator: torch.Generator) -> dict[str, float]:
    """How well linear probes recover the token and the position from the vectors ``model`` produces.

    Random ids ``(batch, seq_len)`` (drawn with ``generator``) go through ``model``; each of the
    ``batch * seq_len`` output vectors is one sample. The probes (:func:`lda_predict`) are fitted on the first 75%
    of the sequences and measured on the rest. Returns ``token`` (accuracy over ``vocab_size`` classes),
    ``position`` (over ``seq_len`` classes) and ``position_within_1`` (off by at most one position).
    """
    if model.training and any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules()):
        raise ValueError(
            "model is in training mode, so dropout would add noise to the probed vectors; call model.eval() first"
        )
    vocab_size = model.token.vocab_size
    ids = torch.randint(0, vocab_size, (batch, seq_len), generator=generator)
    with torch.no_grad():
        x = model(ids.to(model.token.weight.device)).flatten(0, 1)  # (batch * seq_len, d)
    positions = torch.arange(seq_len).repeat(batch)
    predicted, true = lda_predict(x, positions, seq_len)
    error = (predicted - true).abs()
    return {
        "token": lda_probe(x, ids.flatten(), vocab_size),
        "position": (error == 0).double().mean().item(),
        "position_within_1": (error <= 1).double().mean().item(),
    }


def fusion_gradients(
    model: TransformerEmbedding, ids: torch.Tensor, upstream: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of the token table and of the learned position table for the loss ``sum(model(ids) * upstream)``.

    Args:
        model: a :class:`~course_embed.fusion.TransformerEmbedding` with ``position="learned"``.
        ids: ``(b, s)``.
        upstream: ``(b, s, d)``, the gradient arriving at the output.

    Returns:
        ``(token_grad, position_grad)`` of shapes ``(V, d_token)`` and ``(L, d_p)``; ``model``'s own ``.grad``
        fields are left untouched.
    """
    if model.position != "learned":
        raise ValueError(
            f"fusion_gradients needs a learned position table, got position={model.position!r}; "
            f"build the model with position='learned'"
        )
    out = model(ids)
    if upstream.shape != out.shape:
        raise ValueError(f"upstream must have the output's shape {tuple(out.shape)}, got {tuple(upstream.shape)}")
    token_grad, position_grad = torch.autograd.grad(
        (out * upstream).sum(), [model.token.weight, model.positions.weight]
    )
    return token_grad, position_grad


def layer_norm_parts(
    tokens: torch.Tensor, positions: torch.Tensor, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split ``LayerNorm(tokens + positions)`` (no affine) into a token part and a position part.

    LayerNorm subtracts the mean of the vector and divides by its std ``sigma``; both are shared by the two terms,
    so ``LN(t + p) = (t - mean(t)) / sigma + (p - mean(p)) / sigma``. Shapes: ``tokens`` ``(b, s, d)``,
    ``positions`` ``(s, d)`` or ``(b, s, d)``; returns two ``(b, s, d)`` tensors that sum to ``F.layer_norm``.
    """
    tokens, positions = torch.broadcast_tensors(tokens, positions)
    sigma = torch.sqrt((tokens + positions).var(dim=-1, unbiased=False, keepdim=True) + eps)
    return (
        (tokens - tokens.mean(dim=-1, keepdim=True)) / sigma,
        (positions - positions.mean(dim=-1, keepdim=True)) / sigma,
    )


def scale_balance(tokens: torch.Tensor, positions: torch.Tensor, layer_norm: bool = False) -> dict[str, float]:
    """Mean norms of the fused vector and of its two parts, and the position's share, in float64.

    ``tokens`` ``(b, s, d)`` and ``positions`` ``(s, d)`` are the two terms of the sum; with ``layer_norm`` they
    are first replaced by their parts of ``LayerNorm(tokens + positions)`` (:func:`layer_norm_parts`). Returns
    ``fused_norm``, ``token_norm``, ``position_norm`` and ``position_share``, the mean of
    ``|p| / (|t| + |p|)`` over the vectors.
    """
    t, p = tokens.detach().double(), positions.detach().double().to(tokens.device)
    if layer_norm:
        t, p = layer_norm_parts(t, p)
    t, p = torch.broadcast_tensors(t, p)
    tn, pn = t.norm(dim=-1), p.norm(dim=-1)
    return {
        "fused_norm": (t + p).norm(dim=-1).mean().item(),
        "token_norm": tn.mean().item(),
        "position_norm": pn.mean().item(),
        "position_share": (pn / (tn + pn)).mean().item(),
    }


def binomial_mean_abs_error(n: int, keep: float) -> float:
    """Exact ``E|K / (n keep) - 1|`` for ``K ~ Binomial(n, keep)``.

    This is the expected relative error of the average of ``n`` dropout samples of one entry (kept with
    probability ``keep``, scaled by ``1 / keep``) against the eval-mode value; about ``sqrt(2 (1 - keep) /
    (pi keep n))`` for large ``n``.
    """
    if n < 1 or not 0 < keep <= 1:
        raise ValueError(f"need n >= 1 and keep in (0, 1], got n={n}, keep={keep}")
    if keep == 1:
        return 0.0
    k = torch.arange(n + 1, dtype=torch.float64)
    log_pmf = (
        math.lgamma(n + 1)
        - torch.lgamma(k + 1)
        - torch.lgamma(n - k + 1)
        + k * math.log(keep)
        + (n - k) * math.log1p(-keep)
    )
    return (log_pmf.exp() * (k / (n * keep) - 1).abs()).sum().item()


def dropout_statistics(model: TransformerEmbedding, ids: torch.Tensor, n_samples: int) -> dict[str, float]:
    """What the dropout of ``model`` does, measured: eval vs train mode, and the average over many masks.

    Runs ``model(ids)`` (ids ``(b, s)``) twice in eval mode, and in training mode on ``n_samples`` copies of
    ``ids`` stacked along the batch (one forward pass, an independent mask per copy, from the global RNG); then
    restores the model's mode. Returns

    * ``p``: the dropout probability;
    * ``eval_repeat_change``: ``max |eval - eval|`` over two eval runs (0: eval mode is deterministic);
    * ``train_change``: ``max |train - eval|`` for the first training sample;
    * ``zero_fraction``: fraction of the non-zero eval entries that training mode zeroes (expected ``p``);
    * ``kept_scale_error``: ``max |train - eval / (1 - p)|`` over kept entries (0: kept entries are rescaled);
    * ``mean_relative_error``: ``mean |average of the samples - eval| / mean |eval|``, whose expectation is
      :func:`binomial_mean_abs_error` ``(n_samples, 1 - p)``: the expected output equals the eval output.
    """
    p = model.dropout.p
    if not 0 < p < 1:
        raise ValueError(f"the model's dropout probability must be in (0, 1) to measure it, got {p}")
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    was_training = model.training
    with torch.no_grad():
        model.eval()
        clean = model(ids).double()  # (b, s, d)
        again = model(ids).double()
        model.train()
        noisy = model(ids.repeat(n_samples, 1)).double().unflatten(0, (n_samples, ids.shape[0]))  # (n, b, s, d)
    model.train(was_training)
    live = (clean != 0).expand_as(noisy)
    kept = noisy != 0
    return {
        "p": p,
        "eval_repeat_change": (again - clean).abs().max().item(),
        "train_change": (noisy[0] - clean).abs().max().item(),
        "zero_fraction": (live & ~kept).sum().item() / live.sum().item(),
        "kept_scale_error": (noisy - clean / (1 - p))[kept].abs().max().item(),
        "mean_relative_error": ((noisy.mean(dim=0) - clean).abs().mean() / clean.abs().mean()).item(),
    }


def pad_influence(
    embedding: torch.nn.Module, attention: torch.nn.MultiheadAttention, ids: torch.Tensor, n_pads: int, pad_id: int
) -> dict[str, float]:
    """How ``n_pads`` trailing pad tokens change the self-attention outputs of the real tokens.

    Args:
        embedding: ids ``(b, s)`` -> ``(b, s, d)``, e.g. a :class:`~course_embed.fusion.TransformerEmbedding`.
        attention: a batch-first ``nn.MultiheadAttention`` of width ``d``.
        ids: real tokens ``(b, s)``, no pads.
        n_pads: pads appended to every sequence.
        pad_id: the pad token id (the embedding's ``padding_idx``).

    Returns ``pad_input_norm`` (mean norm of the vectors at the pad positions: not zero once positions are added),
    ``unmasked`` (``max |change|`` of the real tokens' outputs when pads are attended to) and ``masked`` (the same
    with ``key_padding_mask = ids == pad_id``, which removes the pads' keys).
    """
    if embedding.training or attention.training:
        raise ValueError("call .eval() on embedding and attention first: dropout would make the comparison random")
    if not attention.batch_first:
        raise ValueError("attention must be built with batch_first=True (inputs are (batch, seq, d))")
    if n_pads < 1:
        raise ValueError(f"n_pads must be >= 1, got {n_pads}")
    if bool((ids == pad_id).any()):
        raise ValueError(f"ids must hold only real tokens, but contain the pad id {pad_id}")
    padded = torch.cat((ids, torch.full((ids.shape[0], n_pads), pad_id, dtype=ids.dtype, device=ids.device)), 1)
    with torch.no_grad():
        x, x_pad = embedding(ids), embedding(padded)
        reference = attention(x, x, x, need_weights=False)[0]
        unmasked = attention(x_pad, x_pad, x_pad, need_weights=False)[0]
        masked = attention(x_pad, x_pad, x_pad, key_padding_mask=padded == pad_id, need_weights=False)[0]
    s = ids.shape[1]
    return {
        "pad_input_norm": x_pad[:, s:].norm(dim=-1).mean().item(),
        "unmasked": max_abs_difference(unmasked[:, :s], reference),
        "masked": max_abs_difference(masked[:, :s], reference),
    }


#: XLM-R base (Conneau et al., 2020): one SentencePiece vocabulary of 250,002 tokens shared by 100 languages.
XLMR_BASE = ModelConfig(
    "XLM-R base",
    250002,
    768,
    12,
    3072,
    positions=514,
    token_types=1,
    embedding_norm=True,
    final_norm=False,
    output="none",
    pooler=True,
)


def vocabulary_parameters(d_model: int, shared_vocab: int, per_language_vocab: Sequence[int]) -> dict[str, int]:
    """Token-table parameters of one shared vocabulary vs one table per language.

    Returns ``shared`` (``shared_vocab * d``) and ``separate`` (``sum(per_language_vocab) * d``, the size of a
    :class:`~course_embed.multilingual.MultilingualEmbedding` with those vocabularies).
    """
    if shared_vocab < 1 or not per_language_vocab or min(per_language_vocab) < 1:
        raise ValueError(
            f"vocabulary sizes must be positive, got shared_vocab={shared_vocab} and "
            f"per_language_vocab={list(per_language_vocab)}"
        )
    return {"shared": shared_vocab * d_model, "separate": sum(per_language_vocab) * d_model}
