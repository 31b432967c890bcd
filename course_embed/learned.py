"""Learned absolute positional embedding (as in BERT and GPT-2): one trainable vector per position.

Shapes: ``b`` batch, ``s`` sequence, ``d`` model width, ``L`` table length (``max_len``).

Unlike the sinusoidal table, a learned table has no row for a position it was not built with: asking for one
is an error, not a silent wrap-around. :meth:`LearnedPositionalEmbedding.resize` extends it by linear
interpolation, the learned-table analogue of RoPE position interpolation (chapter 5).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .checks import Fixed, check_device_dtype, check_features, check_offset, check_positions, check_size, fix


class LearnedPositionalEmbedding(nn.Module):
    """Adds a trainable vector per position to a batch-first input.

    Args:
        max_len: number of positions ``L`` the table holds.
        d_model: width ``d``.
        init_std: std of the normal init (0.02, as BERT and GPT-2).

    Shapes:
        ``forward(x, offset)``: ``(b, s, d) -> (b, s, d)``, adding rows ``offset .. offset + s - 1``, which
        must be ``< L``.

    Example:
        >>> import torch, course_embed as ce
        >>> learned = ce.LearnedPositionalEmbedding(max_len=32, d_model=16)
        >>> learned(torch.zeros(2, 10, 16)).shape  # (b, s, d); s + offset must stay <= 32
        torch.Size([2, 10, 16])
        >>> learned.resize(64).max_len  # interpolated to 64 rows
        64
    """

    max_len = Fixed()
    d_model = Fixed()

    def __init__(self, max_len: int, d_model: int, init_std: float = 0.02, device=None, dtype=None):
        super().__init__()
        max_len, d_model = check_size(max_len, "max_len"), check_size(d_model, "d_model")
        check_device_dtype(device, dtype)
        fix(self, max_len=max_len, d_model=d_model)
        self.weight = nn.Parameter(torch.empty(max_len, d_model, device=device, dtype=dtype))
        nn.init.normal_(self.weight, 0.0, init_std)

    def encoding(self, length: int, offset: int = 0, *, dtype=None, device=None) -> torch.Tensor:
        """Rows for positions ``offset .. offset + length - 1``: ``(length, d)``."""
        offset = check_offset(offset)
        check_positions(length, offset, self.max_len)
        return self.weight[offset : offset + length].to(device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Return ``x + W[offset : offset + s]`` for ``x`` of shape ``(b, s, d)``."""
        check_features(x, self.d_model)
        offset = check_offset(offset)
        check_positions(x.shape[1], offset, self.max_len, batch=x.shape[0], name="x")
        return x + self.encoding(x.shape[1], offset, dtype=x.dtype, device=x.device)

    @torch.no_grad()
    def resize(self, new_len: int) -> LearnedPositionalEmbedding:
        """Resample the table to ``new_len`` rows by linear interpolation, keeping the first and last rows.

        New row ``j`` is the old table read at position ``j * (L - 1) / (new_len - 1)``. The parameter is
        replaced, so build the optimizer after resizing. Returns ``self``.
        """
        new_len = check_size(new_len, "new_len")
        if new_len < 2 or self.max_len < 2:
            raise ValueError(
                f"resize keeps the first and last rows, so it needs at least 2 rows before and after, got "
                f"new_len={new_len} and max_len={self.max_len}; pass a new_len of at least 2"
            )
        old = self.weight.detach().float().T[None]  # (1, d, L)
        new = F.interpolate(old, size=new_len, mode="linear", align_corners=True)[0].T  # (new_len, d)
        self.weight = nn.Parameter(new.to(self.weight.dtype).contiguous())
        fix(self, max_len=new_len)
        return self

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}"
