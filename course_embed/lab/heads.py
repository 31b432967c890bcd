"""What each attention head does on the copy task: its weight on the previous token and on the induction targets.

Shapes: ``b`` batch, ``h`` heads, ``s`` sequence. In a copy sequence (:func:`~course_embed.lab.corpus.repeat_batch`)
a block of ``p`` distinct bytes repeats, so for a query at ``t >= p`` the byte to predict, ``ids[t + 1]``, is the
byte that followed every earlier occurrence of the current byte: it sits at ``t + 1 - p``, ``t + 1 - 2p``, ... A
head that looks there is an **induction head** (Olsson et al., 2022); it needs, one layer below, a
**previous-token head** that looks at ``t - 1``. :func:`head_roles` measures, for every head, the attention weight on
each of the two.
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
    """Mean attention weight on the induction targets and on the previous token, per head: two ``(h,)`` tensors.

    weights ``(b, h, s, s)`` (query, key) of one layer on the copy rows ids ``(b, s)``. For a query at ``t`` the
    induction targets are the keys ``j <= t`` holding the byte to predict, ``ids[j] == ids[t + 1]`` (every earlier
    repeat, not only the latest). Averaged over every query ``p <= t <= s - 2`` of every row. 1 means the head looks
    only there; a uniform causal head puts about ``(t // p) / (t + 1)`` on the targets and ``1 / (t + 1)`` on the
    previous token.
    """
    b, h, s, _ = weights.shape
    p = periods(ids)  # (b,)
    t = torch.arange(s - 1)
    scored = (t[None, :] >= p[:, None]).to(weights.dtype)  # (b, s - 1): queries in the repeated part, with a target
    causal = torch.ones(s - 1, s, dtype=torch.bool).tril()  # (s - 1, s): key j <= query t
    targets = (ids[:, None, :] == ids[:, 1:, None]) & causal  # (b, s - 1, s): ids[j] == ids[t + 1], j <= t
    on_targets = (weights[:, :, :-1] * targets[:, None].to(weights.dtype)).sum(-1)  # (b, h, s - 1)
    on_previous = weights.diagonal(offset=-1, dim1=-2, dim2=-1)[..., : s - 1]  # (b, h, s - 1): key t - 1
    on_previous = torch.cat((torch.zeros_like(on_previous[..., :1]), on_previous[..., :-1]), dim=-1)  # query t
    count = scored.sum()
    induction = (on_targets * scored[:, None]).sum((0, 2)) / count
    previous = (on_previous * scored[:, None]).sum((0, 2)) / count
    return induction, previous
