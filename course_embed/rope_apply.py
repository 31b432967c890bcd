"""Applying RoPE's rotation: tables in each layout's order, and the passes over q or k that use them.

Shapes: ``h_d`` head dim, ``r`` rotated dims (``h_d`` unless ``partial_rotary_factor < 1``), ``p = r / 2`` pairs,
``n`` positions: ``(s,)`` for one range shared by the batch, ``(b, s)`` for per-sequence positions.

From float64 ``cos``/``sin`` ``(n, p)`` (the attention factor already in) :func:`rotation_tables` makes:

* ``(cis,)``, complex ``(n, p)``, for the interleaved layout in float32/float64: ``x`` viewed as ``p`` complex numbers
  ``x_{2i} + i x_{2i+1}`` and multiplied by ``cis = cos + i sin``: **one pass** over ``x``, written straight into
  the output (``torch.mul(..., out=)``).
* ``(cos_w, sin_w)``, real ``(n, r)``, for the half layout and for half precision: ``cos_w`` holds each pair's
  cosine at both of its dims, ``sin_w`` the sine with the sign of the formula (``-sin`` at the pair's first dim,
  ``+sin`` at its second). Then, with ``x1``/``x2`` the pairs' first and second members (views, no copies)::

      out = x * cos_w                  # one full-width pass
      out[first]  += x2 * sin_w[first]  # x1 cos - x2 sin
      out[second] += x1 * sin_w[second] # x2 cos + x1 sin

  No ``torch.cat`` and no temporaries, unlike Hugging Face's ``q * cos + rotate_half(q) * sin`` (which builds
  ``rotate_half(q)`` and two products before the sum).

The tables are cast once to the input's dtype (through float32: angles are never computed in half precision).
:class:`_Rotation` is the autograd: the gradient of a rotation is the inverse rotation (``conj(cis)``, ``-sin_w``).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable


def uses_complex(layout: str, dtype: torch.dtype) -> bool:
    """Whether the one-pass complex multiplication applies: interleaved pairs in float32 or float64."""
    return layout == "interleaved" and dtype in (torch.float32, torch.float64)


def rotation_tables(
    cos: torch.Tensor, sin: torch.Tensor, layout: str, dtype: torch.dtype, device
) -> tuple[torch.Tensor, ...]:
    """float64 cos/sin ``(..., p)`` as the tables :func:`rotate` reads, in ``dtype`` on ``device``.

    Returns ``(cis,)`` ``(..., p)`` complex, or ``(cos_w, sin_w)`` ``(..., r)`` real (see the module docstring).
    """
    if dtype != torch.float64:
        cos, sin = cos.float(), sin.float()  # round once to float32, then to a narrower dtype
    if uses_complex(layout, dtype):
        return (torch.complex(cos, sin).to(device),)
    if layout == "interleaved":
        cos_w = torch.stack((cos, cos), dim=-1).flatten(-2)  # (..., r): c0 c0 c1 c1 ...
        sin_w = torch.stack((-sin, sin), dim=-1).flatten(-2)  # -s0 s0 -s1 s1 ...
    else:
        cos_w = torch.cat((cos, cos), dim=-1)  # (..., r): c0 .. c_{p-1} c0 .. c_{p-1}
        sin_w = torch.cat((-sin, sin), dim=-1)  # -s0 .. -s_{p-1} s0 .. s_{p-1}
    return cos_w.to(device=device, dtype=dtype), sin_w.to(device=device, dtype=dtype)


def _pairs(x: torch.Tensor, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of the first and second members of every pair: two ``(..., p)`` tensors."""
    if layout == "interleaved":
        return x[..., 0::2], x[..., 1::2]
    half = x.shape[-1] // 2
    return x[..., :half], x[..., half:]


def _complex_view(x: torch.Tensor) -> torch.Tensor:
    """``x`` ``(..., r)`` seen as ``(..., p)`` complex numbers ``x_{2i} + i x_{2i+1}`` (a copy only if needed)."""
    if x.stride(-1) != 1 or x.storage_offset() % 2 or any(step % 2 for step in x.stride()[:-1]):
        x = x.contiguous()
    return torch.view_as_complex(x.unflatten(-1, (-1, 2)))


def _rotate(x: torch.Tensor, tables: tuple[torch.Tensor, ...], layout: str) -> torch.Tensor:
    """Rotate ``x`` ``(..., s, r)`` by tables broadcastable to it (no autograd)."""
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if len(tables) == 1:  # one complex multiplication, written into the output
        torch.mul(_complex_view(x), tables[0], out=torch.view_as_complex(out.unflatten(-1, (-1, 2))))
        return out
    cos_w, sin_w = tables
    torch.mul(x, cos_w, out=out)
    x1, x2 = _pairs(x, layout)
    (o1, o2), (s1, s2) = _pairs(out, layout), _pairs(sin_w, layout)
    o1.addcmul_(x2, s1)
    o2.addcmul_(x1, s2)
    return out


def _inverse(tables: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return (tables[0].conj(),) if len(tables) == 1 else (tables[0], -tables[1])


class _Rotation(torch.autograd.Function):
    """Autograd for :func:`_rotate`: the gradient of a rotation is the inverse rotation."""

    @staticmethod
    def forward(ctx, x, layout, *tables):
        ctx.save_for_backward(*tables)
        ctx.layout = layout
        return _rotate(x, tables, layout)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        no_grads = (None,) * (1 + len(ctx.saved_tensors))  # layout and tables
        return _rotate(grad, _inverse(ctx.saved_tensors), ctx.layout), *no_grads


def rotate(x: torch.Tensor, tables: tuple[torch.Tensor, ...], layout: str, rotary_dim: int) -> torch.Tensor:
    """Rotate the first ``rotary_dim`` dims of ``x`` ``(b, h, s, h_d)``; the rest pass through unchanged.

    ``tables`` are ``(s, w)`` or ``(b, 1, s, w)`` (per-sequence positions), from :func:`rotation_tables`.
    """
    if x.numel() == 0:
        return x.clone()
    part = x if rotary_dim == x.shape[-1] else x[..., :rotary_dim]
    if torch.is_grad_enabled() and x.requires_grad:
        rotated = _Rotation.apply(part, layout, *tables)
    else:
        rotated = _rotate(part, tables, layout)
    if part is x:
        return rotated
    return torch.cat((rotated, x[..., rotary_dim:]), dim=-1)  # partial RoPE (Phi, GPT-NeoX): the rest passes
