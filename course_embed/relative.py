"""T5-style relative position bias (Raffel et al., 2020): a learned scalar per head and distance bucket.

Shapes: ``h`` heads, ``q`` queries, ``k`` keys; queries are the last ``q`` of the ``k`` positions.

Shaw et al. (2018) learned a vector per clipped relative distance; T5 reduced it to one scalar per head added to
the attention logits, and shares buckets between distances: the first ``num_buckets // 2`` buckets hold the
distances ``0, 1, 2, ...`` exactly, the rest cover distances up to ``max_distance`` on a log scale, and every
distance beyond falls into the last bucket. ``bidirectional`` (the encoder) spends half the buckets on keys after
the query; causal attention (the decoder) uses all of them for keys before it.

Bucketing follows the T5 rule, including its float32 logarithm, so bucket ids match T5 checkpoints.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .checks import Fixed, check_device_dtype, check_size, fix


def _check_buckets(num_buckets: int, max_distance: int, bidirectional: bool) -> None:
    if not isinstance(num_buckets, int) or num_buckets // 2 // (2 if bidirectional else 1) < 1:
        raise ValueError(
            f"num_buckets must be an integer >= {4 if bidirectional else 2} "
            f"(bidirectional={bidirectional}), got {num_buckets!r}; use e.g. 32, as T5"
        )
    exact = num_buckets // 2 // (2 if bidirectional else 1)
    if not max_distance > exact:
        raise ValueError(
            f"max_distance must exceed the {exact} exactly-bucketed distances, got {max_distance}; use a larger "
            f"one, e.g. 128 as T5, or fewer buckets"
        )


def relative_position_bucket(
    relative_position: torch.Tensor, *, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """Bucket id of each ``key - query`` offset (T5's rule).

    With ``n`` buckets per direction (``num_buckets``, halved when ``bidirectional``; bidirectional keys after
    the query use buckets ``n .. 2n - 1``) and ``e = n // 2``: distance ``r < e`` gets bucket ``r``; larger
    ones get ``e + floor(log(r / e) / log(max_distance / e) * (n - e))``, capped at ``n - 1``. Causal: keys
    after the query count as distance 0.

    Shapes:
        ``relative_position`` of any shape, integer -> bucket ids of the same shape, ``torch.long``.

    Example:
        >>> import torch, course_embed as ce
        >>> offsets = torch.tensor([-200, -20, -3, 0, 3, 20, 200])  # key - query
        >>> ce.relative_position_bucket(offsets)  # 16 buckets a side: earlier keys 0 .. 15, later 16 .. 31
        tensor([15, 10,  3,  0, 19, 26, 31])
        >>> ce.relative_position_bucket(offsets, bidirectional=False)  # causal: later keys count as 0
        tensor([31, 17,  3,  0,  0,  0,  0])
    """
    if not isinstance(relative_position, torch.Tensor) or relative_position.is_floating_point():
        kind = relative_position.dtype if isinstance(relative_position, torch.Tensor) else type(relative_position)
        raise TypeError(
            f"relative_position must be an integer tensor of key - query offsets, got {kind}; build it from "
            f"torch.arange positions (keys[None, :] - queries[:, None])"
        )
    _check_buckets(num_buckets, max_distance, bidirectional)
    offset = relative_position.long()
    buckets = torch.zeros_like(offset)
    if bidirectional:
        num_buckets //= 2
        buckets += (offset > 0).long() * num_buckets
        distance = offset.abs()
    else:
        distance = (-offset).clamp(min=0)
    exact = num_buckets // 2
    scaled = torch.log(distance.clamp(min=exact).float() / exact) / math.log(max_distance / exact)
    large = (exact + (scaled * (num_buckets - exact)).long()).clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < exact, distance, large)


class RelativePositionBias(nn.Module):
    """A learned per-head bias for each relative-distance bucket, added to attention logits (T5).

    Args:
        num_heads: ``h``.
        num_buckets: buckets (32 in T5).
        max_distance: where the log-spaced buckets end (128 in T5): every distance from here on falls in the last
            bucket, which starts before it (at 113 with T5's 32 causal buckets).
        bidirectional: ``True`` for encoders, ``False`` for causal attention.
        init_std: std of the normal init of the ``(num_buckets, h)`` table.

    Shapes:
        ``forward(query_len, key_len)``: ``(h, q, k)`` with ``bias[h, i, j] = weight[bucket(j - i), h]`` for the
        queries ``i = k - q .. k - 1``; add it to the ``(b, h, q, k)`` scores. With a KV cache, pass
        ``query_len = 1`` and the cache length plus one as ``key_len``.

    Example:
        >>> import course_embed as ce
        >>> bias = ce.RelativePositionBias(num_heads=4)
        >>> bias(5, 5).shape  # (h, q, k): add it to the (b, h, q, k) scores
        torch.Size([4, 5, 5])
        >>> bias(1, 5).shape  # one decoding step against 4 cached keys
        torch.Size([4, 1, 5])
    """

    num_heads = Fixed()
    num_buckets = Fixed()

    def __init__(
        self,
        num_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
        init_std: float = 0.02,
        device=None,
        dtype=None,
    ):
        super().__init__()
        check_device_dtype(device, dtype)
        num_heads = check_size(num_heads, "num_heads")
        _check_buckets(num_buckets, max_distance, bidirectional)
        fix(self, num_heads=num_heads, num_buckets=num_buckets)
        self.max_distance, self.bidirectional = max_distance, bidirectional
        self.weight = nn.Parameter(torch.empty(num_buckets, num_heads, device=device, dtype=dtype))
        nn.init.normal_(self.weight, 0.0, init_std)

    def buckets(self, query_len: int, key_len: int) -> torch.Tensor:
        """Bucket ids ``(q, k)`` for the last ``query_len`` of ``key_len`` positions."""
        if key_len < 1 or not 1 <= query_len <= key_len:
            raise ValueError(
                f"need 1 <= query_len <= key_len (queries are the last positions), got "
                f"query_len={query_len}, key_len={key_len}; count the cached keys in key_len (query_len=1 when "
                f"decoding one token)"
            )
        keys = torch.arange(key_len, device=self.weight.device)
        queries = keys[key_len - query_len :]
        return relative_position_bucket(
            keys[None, :] - queries[:, None],
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )

    def forward(self, query_len: int, key_len: int) -> torch.Tensor:
        """The bias ``(h, q, k)`` for the last ``query_len`` of ``key_len`` positions."""
        return self.weight[self.buckets(query_len, key_len)].permute(2, 0, 1)  # (q, k, h) -> (h, q, k)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, num_buckets={self.num_buckets}, max_distance={self.max_distance}, "
            f"bidirectional={self.bidirectional}"
        )
