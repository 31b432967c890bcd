"""Token embedding: a lookup table from token ids to vectors.

Shapes: ``b`` batch, ``s`` sequence, ``v`` vocabulary size, ``d`` model width.

The lookup ``W[ids]`` equals ``one_hot(ids) @ W`` (chapter 1 shows it numerically); it is stored as a
table because a ``(b, s, v)`` one-hot tensor would be ``v / d`` times larger than the ``(b, s, d)`` result (and
``v`` times larger than the ids).

Two facts the popular write-ups get wrong, measured in chapters 1 and 2:

* ``nn.Embedding`` initialises its table with N(0, 1), not U(±sqrt(1/d)), and not Xavier.
* The ``sqrt(d)`` factor of Vaswani et al. most likely belongs with a table drawn from N(0, 1/d) that is shared with
  the pre-softmax layer (the paper gives no reason; chapter 2 reconstructs it from Tensor2Tensor's and fairseq's
  code): ``sqrt(d) * N(0, 1/d)`` has unit RMS. Applied to an N(0, 1) table it makes token
  vectors ``sqrt(2 d)`` times larger than a sinusoidal position vector (32x at d = 512).

Speed (chapter 6): a lookup moves memory and does no arithmetic, so its cost is bytes moved / bandwidth. The
textbook ``emb(ids) * sqrt(d) + pe`` makes three passes over a ``(b, s, d)`` tensor and allocates three of them;
:meth:`TokenEmbedding.lookup_add` gathers into the output and adds the position rows in place with the scale
folded in (two passes, one allocation), and scales in place when there is nothing to add.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from .checks import Fixed, check_device_dtype, check_ids, check_int, check_size, fix

Init = Literal["normal", "xavier_uniform", "scaled_normal"]
INITS: tuple[str, ...] = ("normal", "xavier_uniform", "scaled_normal")


def init_table_(weight: torch.Tensor, init: str, padding_idx: int | None = None) -> torch.Tensor:
    """Initialise an embedding table in place and zero its pad row.

    Args:
        weight: the table, ``(v, d)``.
        init: ``"normal"`` is PyTorch's ``nn.Embedding`` default, N(0, 1); ``"xavier_uniform"`` is
            U(±sqrt(6 / (v + d))); ``"scaled_normal"`` is N(0, 1/d) (std ``d**-0.5``), Tensor2Tensor's init
            for its table shared with the output layer (fairseq uses it too, tied or not).
        padding_idx: row to set to zero after the re-init (any init scheme makes it non-zero otherwise).

    Returns:
        ``weight``, for chaining.

    Shapes:
        ``weight``: ``(v, d)``, changed in place; ``v`` rows (token ids), ``d`` columns (``d_model``).

    Example:
        >>> import torch, course_embed as ce
        >>> weight = ce.init_table_(torch.empty(1000, 64), "scaled_normal", padding_idx=0)
        >>> abs(weight[1:].std().item() - 64**-0.5) < 0.01  # std d**-0.5 = 0.125
        True
        >>> bool(weight[0].eq(0).all())  # the pad row is zero again
        True
    """
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    with torch.no_grad():
        if init == "normal":
            nn.init.normal_(weight, 0.0, 1.0)
        elif init == "xavier_uniform":
            nn.init.xavier_uniform_(weight)
        else:
            nn.init.normal_(weight, 0.0, weight.shape[1] ** -0.5)
        if padding_idx is not None:
            weight[padding_idx].zero_()
    return weight


class TokenEmbedding(nn.Module):
    """Token ids to vectors, optionally scaled by ``sqrt(d_model)``.

    Args:
        vocab_size: number of token ids ``v``.
        d_model: vector width ``d``.
        padding_idx: id of the pad token. Its row starts at zero and receives no gradient. It is *not* an
            attention mask: pad positions still reach attention unless a key padding mask removes them.
        scale: multiply the looked-up vectors by ``sqrt(d_model)``.
        init: ``"normal"`` (N(0, 1), PyTorch's default), ``"xavier_uniform"`` or ``"scaled_normal"``
            (N(0, 1/d), std ``d**-0.5``). Default: ``"scaled_normal"`` when ``scale`` is on, so the output has unit RMS,
            else ``"normal"``.
        device, dtype: of the table.
        sparse: return a sparse ``(v, d)`` gradient holding only the looked-up rows (as ``nn.Embedding``); for
            large vocabularies with ``torch.optim.SGD`` or ``torch.optim.SparseAdam``. The optimizer state
            (Adam's two moments) is still dense ``(v, d)``.

    Shapes:
        * ``forward(ids)``: ids ``(*)`` of integers (usually ``(b, s)``) -> ``(*, d)``.
        * ``lookup_add(ids, addend)``: ids ``(*)``, addend broadcastable to ``(*, d)`` -> ``(*, d)``.

    Reference: ``torch.nn.functional.embedding`` (tests compare against it and against ``one_hot(ids) @ W``).

    Example:
        >>> import torch, course_embed as ce
        >>> emb = ce.TokenEmbedding(vocab_size=100, d_model=16, padding_idx=0)
        >>> ids = torch.tensor([[5, 7, 0]])  # (b, s)
        >>> emb(ids).shape
        torch.Size([1, 3, 16])
        >>> bool(emb(ids)[0, 2].eq(0).all())  # the pad row is zero
        True
    """

    vocab_size = Fixed()
    d_model = Fixed()

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        padding_idx: int | None = None,
        scale: bool = True,
        init: Init | None = None,
        device=None,
        dtype=None,
        sparse: bool = False,
    ):
        super().__init__()
        vocab_size, d_model = check_size(vocab_size, "vocab_size"), check_size(d_model, "d_model")
        padding_idx = None if padding_idx is None else check_int(padding_idx, "padding_idx")
        if padding_idx is not None and not 0 <= padding_idx < vocab_size:
            raise ValueError(
                f"padding_idx={padding_idx} is outside the vocabulary [0, {vocab_size}); "
                f"use an id in that range (e.g. 0), or None for no pad token"
            )
        check_device_dtype(device, dtype)
        fix(self, vocab_size=vocab_size, d_model=d_model)
        self.padding_idx, self.scale, self.sparse = padding_idx, scale, sparse
        self.init = init or ("scaled_normal" if scale else "normal")
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self, init: Init | None = None) -> None:
        """Re-initialise the table with ``init`` (default: the constructor's), keeping the pad row zero."""
        init_table_(self.weight, init or self.init, self.padding_idx)

    @property
    def multiplier(self) -> float:
        """The factor applied after the lookup, ``sqrt(d_model)`` or 1."""
        return math.sqrt(self.d_model) if self.scale else 1.0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Look up ``ids`` ``(*)`` and return vectors ``(*, d)`` in the table's dtype."""
        check_ids(ids, self.vocab_size)
        out = F.embedding(ids, self.weight, self.padding_idx, sparse=self.sparse)
        # in place: the lookup's backward keeps only the ids, so scaling its fresh output saves a (*, d) temporary
        return out.mul_(self.multiplier) if self.scale else out

    def lookup_add(self, ids: torch.Tensor, addend: torch.Tensor) -> torch.Tensor:
        """``forward(ids) + addend`` in two passes over memory instead of three (the fused input layer).

        Args:
            ids: integer ids ``(*)``, usually ``(b, s)``.
            addend: a tensor of the table's dtype and device broadcastable to ``(*, d)``, usually the position
                rows ``(s, d)``.

        Returns:
            ``(*, d)``, equal to ``W[ids] * multiplier + addend`` up to the rounding of one fused multiply-add.
            Gradients reach the table (dense or sparse, as ``sparse``) and ``addend`` (summed over broadcast dims).

        Under ``torch.compile`` it is traced as the textbook ``F.embedding(ids, W) * multiplier + addend``: the
        two-pass fusion is an eager optimisation, and the compiler fuses the textbook expression into one loop.
        """
        check_ids(ids, self.vocab_size)
        if not isinstance(addend, torch.Tensor) or addend.dtype != self.weight.dtype:
            kind = addend.dtype if isinstance(addend, torch.Tensor) else type(addend).__name__
            raise TypeError(
                f"addend must be a tensor of the table's dtype {self.weight.dtype}, got {kind}; "
                f"cast it with addend.to({self.weight.dtype})"
            )
        shape = (*ids.shape, self.d_model)
        extra = len(shape) - addend.dim()  # broadcasting must not change the output's shape
        if extra < 0 or any(a not in (1, n) for a, n in zip(addend.shape, shape[extra:], strict=False)):
            raise ValueError(
                f"addend of shape {tuple(addend.shape)} does not broadcast to the output shape {shape}; "
                f"pass position rows of shape (seq, d_model) = {shape[-2:]}"
            )
        if torch.compiler.is_compiling():  # traced: the textbook expression, which the compiler fuses itself
            return lookup_add_reference(ids, self.weight, addend, self.multiplier, self.padding_idx, self.sparse)
        if torch.is_grad_enabled() and (self.weight.requires_grad or addend.requires_grad):
            return _LookupAdd.apply(ids, self.weight, addend, self.multiplier, self.padding_idx, self.sparse)
        return _lookup_add(ids, self.weight, addend, self.multiplier, self.padding_idx)  # inference: no graph

    def extra_repr(self) -> str:
        sparse = ", sparse=True" if self.sparse else ""
        return (
            f"{self.vocab_size}, {self.d_model}, padding_idx={self.padding_idx}, scale={self.scale}, "
            f"init={self.init!r}{sparse}"
        )


def lookup_add_reference(
    ids: torch.Tensor,
    weight: torch.Tensor,
    pe: torch.Tensor,
    scale: float,
    padding_idx: int | None = None,
    sparse: bool = False,
) -> torch.Tensor:
    """The textbook input layer ``W[ids] * scale + pe``, the one place the formula is written out.

    ids ``(b, s)``, weight ``(v, d)``, pe ``(s, d)`` -> ``(b, s, d)``.

    Eager, it makes three passes and allocates three ``(b, s, d)`` tensors; ``torch.compile`` turns it into one
    loop that reads each row once and writes each output once (``compile=True``, and any compiled model).
    """
    return F.embedding(ids, weight, padding_idx, sparse=sparse) * scale + pe


def _lookup_add(
    ids: torch.Tensor, weight: torch.Tensor, addend: torch.Tensor, scale: float, padding_idx: int | None
) -> torch.Tensor:
    """``W[ids] * scale + addend`` in two passes: gather into the output, then one in-place add (no autograd)."""
    out = F.embedding(ids, weight, padding_idx)  # pass 1: (*, d), the only allocation
    torch.add(addend, out, alpha=scale, out=out)  # pass 2: out = addend + scale * out, in place
    return out


class _LookupAdd(torch.autograd.Function):
    """``W[ids] * scale + addend``: gather into the output buffer, then one in-place ``add`` with the scale folded in.

    Backward: ``dW = embedding_backward(dout * scale)`` (dense or sparse), ``daddend = dout`` summed to its shape.
    Reference: the textbook ``F.embedding(ids, W, padding_idx) * scale + addend`` (tests compare both ways).
    """

    @staticmethod
    def forward(ctx, ids, weight, addend, scale: float, padding_idx: int | None, sparse: bool):
        out = _lookup_add(ids, weight, addend, scale, padding_idx)
        ctx.save_for_backward(ids)
        ctx.num_weights, ctx.addend_shape = weight.shape[0], addend.shape
        ctx.scale, ctx.padding_idx, ctx.sparse = scale, padding_idx, sparse
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (ids,) = ctx.saved_tensors
        grad_weight = grad_addend = None
        if ctx.needs_input_grad[1]:
            scaled = grad * ctx.scale if ctx.scale != 1.0 else grad
            pad = -1 if ctx.padding_idx is None else ctx.padding_idx
            grad_weight = torch.ops.aten.embedding_backward(scaled, ids, ctx.num_weights, pad, False, ctx.sparse)
        if ctx.needs_input_grad[2]:
            grad_addend = grad.sum_to_size(ctx.addend_shape)
        return None, grad_weight, grad_addend, None, None, None


def tie_weights(embedding: TokenEmbedding | nn.Embedding, output: nn.Linear) -> nn.Linear:
    """Share one ``(v, d)`` table between the input embedding and the pre-softmax layer (Press & Wolf, 2017).

    After the call ``output.weight is embedding.weight``: one tensor, one gradient, half the parameters.

    Args:
        embedding: table ``(v, d)``.
        output: ``nn.Linear(d, v)``, whose weight is ``(v, d)``.

    Returns:
        ``output``, now computing ``logits = h @ W.T`` with the embedding table ``W``.

    Shapes:
        ``embedding.weight`` and ``output.weight``: ``(v, d)``. The tied ``output`` maps hidden states
        ``(b, s, d)`` to logits ``(b, s, v)``.

    Example:
        >>> import torch, course_embed as ce
        >>> emb = ce.TokenEmbedding(vocab_size=100, d_model=16)
        >>> head = ce.tie_weights(emb, torch.nn.Linear(16, 100, bias=False))
        >>> head.weight is emb.weight  # one tensor
        True
        >>> head(torch.randn(2, 5, 16)).shape  # (b, s, d) -> (b, s, v)
        torch.Size([2, 5, 100])
    """
    if output.weight.shape != embedding.weight.shape:
        raise ValueError(
            f"cannot tie an output layer of weight shape {tuple(output.weight.shape)} to an embedding "
            f"of shape {tuple(embedding.weight.shape)}; build it as nn.Linear(d_model, vocab_size)"
        )
    output.weight = embedding.weight
    return output
