"""Sinusoidal positional encoding (Vaswani et al., 2017, section 3.5).

Shapes: ``b`` batch, ``s`` sequence, ``d`` model width, ``p`` position.

    PE[p, 2i]     = sin(p * base**(-2i/d))
    PE[p, 2i + 1] = cos(p * base**(-2i/d))

Pair ``i`` turns at angular frequency ``base**(-2i/d)``: wavelengths form a geometric progression from
``2*pi`` (``i = 0``, the fastest, lowest-index dimensions) to nearly ``base * 2*pi`` (the slowest, highest-index
dimensions). Because each pair is a point on a circle, ``PE[p + k] = M_k @ PE[p]`` with ``M_k`` block-diagonal
2x2 rotations that do not depend on ``p`` (:func:`offset_rotation`).

Angles are computed in float64 and cast at the end. Computing positions or angles in float16/bfloat16 is a
known bug: bfloat16 holds integers exactly only up to 256, so rows repeat from position 257.
"""

from __future__ import annotations

import torch
from torch import nn

from .checks import Fixed, check_device_dtype, check_features, check_number, check_offset, check_size, fix


def _angle_dtype(device: torch.device) -> torch.dtype:
    # float64 everywhere it exists (MPS has no float64; float32 is still far better than half precision).
    return torch.float32 if device.type == "mps" else torch.float64


def inverse_frequencies(d_model: int, base: float = 10000.0, *, device=None, dtype=torch.float64) -> torch.Tensor:
    """Angular frequencies ``base**(-2i/d)`` of the ``d/2`` sin/cos pairs, fastest first.

    Shapes:
        ``(d/2,)`` for ``d = d_model`` (even), in ``dtype`` (float64 by default).

    Example:
        >>> import course_embed as ce
        >>> ce.inverse_frequencies(8)  # base**(-2i/d) for i = 0 .. 3
        tensor([1.0000, 0.1000, 0.0100, 0.0010], dtype=torch.float64)
    """
    if d_model % 2 or d_model < 2:
        raise ValueError(
            f"d_model must be a positive even number (sin/cos come in pairs), got {d_model}; "
            f"use {d_model + 1 if d_model % 2 else 2}"
        )
    base = check_number(base, "base", above=1.0, fix="use 10000, the original model's base")
    exponents = torch.arange(0, d_model, 2, device=device, dtype=dtype) / d_model
    return base**-exponents


def sinusoidal_table(
    length: int, d_model: int, base: float = 10000.0, *, offset: int = 0, dtype: torch.dtype | None = None, device=None
) -> torch.Tensor:
    """The sinusoidal encoding of positions ``offset .. offset + length - 1``.

    Args:
        length: number of positions ``s``.
        d_model: width ``d`` (even).
        base: the wavelength base, 10000 in the original model.
        offset: first position (for incremental decoding).
        dtype: of the result (default float32). Angles are always computed in float64, then cast.
        device: of the result.

    Returns:
        The table, one row per position; even columns are sines, odd columns cosines.

    Shapes:
        ``(s, d)``, with ``s = length`` and ``d = d_model``.

    Example:
        >>> import torch, course_embed as ce
        >>> pe = ce.sinusoidal_table(10, 8)  # (s, d)
        >>> pe.shape
        torch.Size([10, 8])
        >>> pe[0]  # position 0: every sine is 0, every cosine 1
        tensor([0., 1., 0., 1., 0., 1., 0., 1.])
        >>> bool(torch.equal(ce.sinusoidal_table(2, 8, offset=8), pe[8:]))  # rows 8 and 9
        True
    """
    length = check_size(length, "length", minimum=0)
    offset = check_offset(offset)
    device = torch.device(device) if device is not None else torch.device("cpu")
    work = _angle_dtype(device)
    positions = torch.arange(offset, offset + length, device=device, dtype=work)
    angles = positions[:, None] * inverse_frequencies(d_model, base, device=device, dtype=work)  # (s, d/2)
    table = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # (s, d): sin, cos interleaved
    return table.to(dtype or torch.float32)


def offset_rotation(k: float, d_model: int, base: float = 10000.0, *, dtype=torch.float64) -> torch.Tensor:
    """The ``(d, d)`` matrix ``M_k`` with ``PE[p + k] = M_k @ PE[p]`` for every position ``p``.

    ``M_k`` is block diagonal; block ``i`` is ``[[cos(w_i k), sin(w_i k)], [-sin(w_i k), cos(w_i k)]]`` with
    ``w_i = base**(-2i/d)``: it rotates the ``(sin, cos)`` pair ``i`` by the angle ``w_i k``, whatever ``p`` is.

    Shapes:
        ``(d, d)`` for ``d = d_model``; it multiplies a row ``PE[p]`` ``(d,)`` of :func:`sinusoidal_table`.

    Example:
        >>> import torch, course_embed as ce
        >>> pe = ce.sinusoidal_table(10, 8, dtype=torch.float64)  # (s, d)
        >>> m3 = ce.offset_rotation(3, 8)  # (d, d)
        >>> bool(torch.allclose(m3 @ pe[2], pe[5])) and bool(torch.allclose(m3 @ pe[6], pe[9]))
        True
    """
    angles = k * inverse_frequencies(d_model, base, dtype=torch.float64)
    cos, sin = angles.cos(), angles.sin()
    blocks = torch.stack((torch.stack((cos, sin), -1), torch.stack((-sin, cos), -1)), -2)  # (d/2, 2, 2)
    return torch.block_diag(*blocks).to(dtype)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the sinusoidal encoding to a batch-first input; works at any length.

    Args:
        d_model: width ``d`` (even).
        max_len: length of the table computed up front. Longer inputs grow the cached table (to at least twice
            its size) instead of failing; the grown table equals a freshly computed one exactly.
        base: wavelength base.

    Shapes:
        ``forward(x, offset)``: ``(b, s, d) -> (b, s, d)``, adding the rows for positions
        ``offset .. offset + s - 1``.

    The cache is float32; outputs follow ``x``'s device and dtype by casting it, never by computing angles in
    half precision, except float64, which gets a table computed in float64 (float64-accurate, not a widened
    float32). The cast table is kept per (dtype, device), so a bfloat16 model does not pay an ``(s, d)``
    conversion on every call. Reference: :func:`sinusoidal_table`, itself tested against a float64 closed form.

    Example:
        >>> import torch, course_embed as ce
        >>> pe = ce.SinusoidalPositionalEncoding(d_model=16, max_len=64)
        >>> x = torch.zeros(2, 10, 16)  # (b, s, d)
        >>> bool(torch.equal(pe(x)[0], ce.sinusoidal_table(10, 16)))  # adds rows 0 .. 9
        True
        >>> bool(torch.equal(pe(x[:, :1], offset=9)[0, 0], pe(x)[0, 9]))  # one decoding step at position 9
        True
    """

    table: torch.Tensor
    d_model = Fixed()
    base = Fixed()

    def __init__(self, d_model: int, max_len: int = 512, base: float = 10000.0, device=None):
        super().__init__()
        check_device_dtype(device)
        max_len = check_size(max_len, "max_len", minimum=0)
        fix(self, d_model=d_model, base=base)
        self.register_buffer("table", sinusoidal_table(max_len, d_model, base, device=device), persistent=False)
        self._casts: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # (dtype, device) -> (source, cast)

    def reset_parameters(self) -> None:
        """Recompute the table from float64 angles, in its dtype on its device (after ``to_empty``: deferred init),
        and drop the casts of the old one."""
        self._casts.clear()
        rows, dtype, device = self.table.shape[0], self.table.dtype, self.table.device
        if device.type != "meta":
            self.table = sinusoidal_table(rows, self.d_model, self.base, dtype=dtype, device=device)

    def _apply(self, fn, recurse=True):
        """``module.to``, ``.double()``, ``to_empty``, ...: the table is recomputed, never widened or left empty."""
        super()._apply(fn, recurse)
        self.reset_parameters()
        return self

    def _table_as(self, dtype, device) -> torch.Tensor:
        """The whole cached table in ``dtype`` on ``device``, cast once and reused until the table changes."""
        device = torch.device(device) if device is not None else None
        if (dtype is None or dtype == self.table.dtype) and (device is None or device == self.table.device):
            return self.table
        key = (dtype, device)
        source, cast = self._casts.get(key, (None, None))
        if source is not self.table:  # first use, or the table grew or moved (module.to) since
            if dtype == torch.float64:  # float64 in, float64-accurate out: recompute rather than widen float32
                cast = sinusoidal_table(
                    self.table.shape[0], self.d_model, self.base, dtype=dtype, device=device or self.table.device
                )
            else:
                cast = self.table.to(device=device, dtype=dtype)
            self._casts[key] = (self.table, cast)
        return cast

    def encoding(self, length: int, offset: int = 0, *, dtype=None, device=None) -> torch.Tensor:
        """Rows for positions ``offset .. offset + length - 1``: ``(length, d)``, cast to ``dtype``/``device``."""
        offset = check_offset(offset)
        end = offset + check_size(length, "length", minimum=0)
        if end > self.table.shape[0]:  # grow: compute the new rows only (each row depends on its position alone)
            rows = self.table.shape[0]
            new = sinusoidal_table(
                max(end, 2 * rows) - rows, self.d_model, self.base, offset=rows, dtype=self.table.dtype,
                device=self.table.device,
            )  # fmt: skip
            self.table = torch.cat((self.table, new))
        return self._table_as(dtype, device)[offset:end]

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Return ``x + PE[offset : offset + s]`` for ``x`` of shape ``(b, s, d)``."""
        check_features(x, self.d_model)
        return x + self.encoding(x.shape[1], offset, dtype=x.dtype, device=x.device)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, base={self.base}, cached={self.table.shape[0]}"
