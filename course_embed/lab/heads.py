"""What each attention head does on the copy task: its weight on the previous token and on the induction target.

Shapes: ``b`` batch, ``h`` heads, ``s`` sequence. In a copy sequence (:func:`~course_embed.lab.corpus.repeat_batch`)
a block of ``p`` distinct bytes repeats, so for a query at ``t >= p`` the byte to predict is the one at ``t - p + 1``,
the byte that followed the previous occurrence of the current byte. A head that looks there is an **induction
head** (Olsson et al., 2022); it needs, one layer below, a **previous-token head** that looks at ``t - 1``.
:func:`head_roles` measures, for every head, the mean attention weight on each of the two positions.
"""

from __future__ import annotations

import torch


def periods(ids: torch.Tensor) -> torch.Tensor:
    """The block length ``p`` of each copy sequence ``(b, s)``: where the first byte first recurs. ``(b,)``."""
    repeats = ids[:, 1:] == ids[:, :1]
    if not repeats.any(dim=1).all():
        raise ValueError("ids must be copy-task rows whose first byte recurs (see corpus.repeat_batch)")
    return repeats.int().argmax(dim=1) + 1


def head_roles(weights: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean attention weight on the induction target and on the previous token, per head: two ``(h,)`` tensors.

    weights ``(b, h, s, s)`` (query, key) of one layer on the copy rows ids ``(b, s)``; averaged over every query
    ``t >= p`` of every row, where both targets exist. 1 means the head looks only there; a uniform causal head
    puts about ``1 / t`` on each.
    """
    b, h, s, _ = weights.shape
    p = periods(ids)  # (b,)
    t = torch.arange(s)
    scored = (t[None, :] >= p[:, None]).to(weights.dtype)  # (b, s): queries in the repeated part
    induction_key = (t[None, :] - p[:, None] + 1).clamp(min=0)  # (b, s)
    on_target = weights.gather(-1, induction_key[:, None, :, None].expand(b, h, s, 1))[..., 0]  # (b, h, s)
    on_previous = weights.diagonal(offset=-1, dim1=-2, dim2=-1)  # (b, h, s - 1): query t, key t - 1
    count = scored.sum()
    induction = (on_target * scored[:, None]).sum((0, 2)) / count
    previous = (on_previous * scored[:, None, 1:]).sum((0, 2)) / count
    return induction, previous
