"""ALiBi, attention with linear biases (Press et al., 2022): no position vectors, a per-head distance penalty.

Shapes: ``h`` heads, ``q`` queries, ``k`` keys. Queries are the last ``q`` of the ``k`` positions (``q = k`` for a
full sequence, ``q = 1`` when decoding one token against a KV cache of ``k - 1`` tokens).

Head ``h`` adds ``-m_h * (i - j)`` to the attention score of query ``i`` and key ``j <= i``: the further back a key,
the larger the penalty, steeply for heads with a large slope ``m_h`` and gently for those with a small one.

Softmax ignores a constant added to every score of a query, so ``-m_h (i - j) = m_h j - m_h i`` can drop its
query part: the *key-only* bias ``-m_h * (k - 1 - j)``, shape ``(h, 1, k)``, gives exactly the same attention
weights for every causal query, broadcasts over the queries, and stays correct when decoding with a cache
(:func:`alibi_bias`). Add it to the ``(b, h, q, k)`` scores before the causal mask, or pass it as ``attn_mask``
to ``scaled_dot_product_attention`` when no causal mask is needed (decoding one token). The full ``(h, q, k)``
form is built only on request.
"""

from __future__ import annotations

import math

import torch

from .checks import check_size


def _slope_list(num_heads: int) -> list[float]:
    """The paper's rule: a geometric sequence for powers of two, interleaved from the next power otherwise."""
    if math.log2(num_heads).is_integer():
        start = 2.0 ** (-8.0 / num_heads)
        return [start ** (i + 1) for i in range(num_heads)]
    closest = 2 ** math.floor(math.log2(num_heads))
    return _slope_list(closest) + _slope_list(2 * closest)[0::2][: num_heads - closest]


def alibi_slopes(num_heads: int, *, dtype=torch.float32, device=None) -> torch.Tensor:
    """Per-head slopes ``m``, steepest first.

    For ``h`` a power of two: ``2^(-8/h), 2^(-16/h), ..., 2^(-8)``, a geometric sequence whose start and ratio are
    ``2^(-8/h)`` (8 heads: 1/2, 1/4, ..., 1/256). Otherwise, with ``p`` the largest power of two below ``h``: the
    ``p`` slopes for ``p`` heads, then every other slope of the ``2p`` sequence for the remaining ``h - p`` heads.

    Shapes:
        ``(h,)`` for ``h = num_heads``, in ``dtype`` (float32 by default).

    Example:
        >>> import course_embed as ce
        >>> ce.alibi_slopes(4)  # 2^(-2), 2^(-4), 2^(-6), 2^(-8)
        tensor([0.2500, 0.0625, 0.0156, 0.0039])
        >>> ce.alibi_slopes(6)  # the 4 slopes of 4 heads, then 2^(-1) and 2^(-3) from the 8-head sequence
        tensor([0.2500, 0.0625, 0.0156, 0.0039, 0.5000, 0.1250])
    """
    num_heads = check_size(num_heads, "num_heads")
    return torch.tensor(_slope_list(num_heads), dtype=torch.float64).to(device=device, dtype=dtype)


def alibi_bias(slopes: torch.Tensor, key_len: int, *, query_len: int | None = None) -> torch.Tensor:
    """The ALiBi bias for ``key_len`` keys, in ``slopes``' dtype and device.

    Args:
        slopes: ``(h,)``, from :func:`alibi_slopes`.
        key_len: ``k``, the number of keys (cached ones included).
        query_len: ``None`` for the key-only form; an int ``q <= k`` for the full form.

    Returns:
        The key-only form ``-m_h * (k - 1 - j)``, the exact bias of the last query; for any other causal
        query it differs by a per-query constant, which softmax cancels. The full form ``-m_h * |i - j|``
        for queries ``i = k - q .. k - 1``, a function of the distance only (the causal mask removes ``j > i``).

    Shapes:
        ``slopes`` ``(h,)`` -> key-only ``(h, 1, k)`` or full ``(h, q, k)``; add it to the ``(b, h, q, k)``
        scores.

    Example:
        >>> import course_embed as ce
        >>> slopes = ce.alibi_slopes(8)  # (h,): 1/2, 1/4, ..., 1/256
        >>> ce.alibi_bias(slopes, 5)[0]  # key-only form, head 0: -m (k - 1 - j)
        tensor([[-2.0000, -1.5000, -1.0000, -0.5000,  0.0000]])
        >>> ce.alibi_bias(slopes, 5, query_len=5).shape  # the full (h, q, k) form
        torch.Size([8, 5, 5])
    """
    if not isinstance(slopes, torch.Tensor) or slopes.dim() != 1:
        raise ValueError(
            f"slopes must be a (heads,) tensor from alibi_slopes, got "
            f"{tuple(slopes.shape) if isinstance(slopes, torch.Tensor) else type(slopes).__name__}; pass "
            f"alibi_slopes(num_heads)"
        )
    key_len = check_size(key_len, "key_len")
    work = torch.float64 if slopes.dtype == torch.float64 else torch.float32  # positions in half precision collide
    keys = torch.arange(key_len, device=slopes.device, dtype=work)
    if query_len is None:
        return (slopes[:, None].to(work) * (keys - (key_len - 1)))[:, None, :].to(slopes.dtype)  # (h, 1, k)
    query_len = check_size(query_len, "query_len")
    if not query_len <= key_len:
        raise ValueError(
            f"query_len must be in [1, key_len={key_len}] (queries are the last positions), got {query_len}; "
            f"count the cached keys in key_len (query_len=1 when decoding one token)"
        )
    queries = torch.arange(key_len - query_len, key_len, device=slopes.device, dtype=work)
    return (-slopes[:, None, None].to(work) * (queries[:, None] - keys[None, :]).abs()).to(slopes.dtype)  # (h, q, k)
