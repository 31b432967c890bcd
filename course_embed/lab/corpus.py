"""Chapter 5's data: real text that ships with every CPython, and two synthetic probes of long context.

Shapes: ``b`` batch, ``s`` sequence. Token ids are bytes (vocabulary 256); targets are next-token ids, with
:data:`IGNORE` where nothing is to be predicted.

* **The corpus** (:func:`corpus_bytes`): the ``pydoc_data.topics`` help texts of the running interpreter (what
  ``help("if")`` prints; about 465 KB of English with code), joined in sorted-key order and encoded as UTF-8. It
  needs no download. Its content changes between Python versions, so :func:`corpus_info` records the version and
  the sha256 of the bytes. :func:`split` keeps the last tenth as the held-out set.
* **The copy task** (:func:`repeat_batch`): a block of ``p`` distinct random bytes repeated to the end; every
  token after the first block equals the one ``p`` back. ``periods`` fixes the range of ``p``: the *fixed-distance*
  test keeps the training range at every length, the *growing-distance* test scales it with the length.
* **Passkey retrieval** (:func:`passkey_batch`): ``pass key: 12345`` at the start, held-out text, and
  ``pass key: 12345`` again at the end; only the five final digits are scored. A model can predict them only by
  finding the first occurrence, however far back it is.
"""

from __future__ import annotations

import hashlib
import sys

import torch

IGNORE = -100  # target id that losses and accuracies skip
VOCAB_SIZE = 256
KEY_PREFIX = b"pass key: "
KEY_DIGITS = 5


def corpus_bytes() -> bytes:
    """The ``pydoc_data.topics`` texts of this interpreter, sorted by topic name, joined by blank lines (UTF-8)."""
    from pydoc_data import topics

    return "\n\n".join(topics.topics[key] for key in sorted(topics.topics)).encode("utf-8")


def corpus_info(data: bytes) -> dict:
    """What identifies the corpus: source, Python version, topic count, size and sha256 of ``data``."""
    from pydoc_data import topics

    return {
        "name": "pydoc_data.topics",
        "python": sys.version.split()[0],
        "topics": len(topics.topics),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def split(data: bytes, valid_fraction: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """``(train, valid)`` int64 byte tensors: the first ``1 - valid_fraction`` of ``data`` and the rest."""
    if not 0 < valid_fraction < 1:
        raise ValueError(f"valid_fraction must be in (0, 1), got {valid_fraction}")
    ids = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
    cut = int(len(ids) * (1 - valid_fraction))
    return ids[:cut], ids[cut:]


def text_batch(
    text: torch.Tensor, batch: int, length: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` windows of ``length`` bytes at random offsets of ``text``: ids and next-byte targets ``(b, s)``."""
    if len(text) <= length:
        raise ValueError(f"text of {len(text)} bytes is too short for windows of length={length}")
    starts = torch.randint(0, len(text) - length, (batch,), generator=generator)
    window = starts[:, None] + torch.arange(length + 1)
    chunk = text[window]  # (b, s + 1)
    return chunk[:, :-1], chunk[:, 1:]


def eval_windows(text: torch.Tensor, length: int, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``tokens`` bytes of ``text`` cut into ``tokens // length`` non-overlapping windows: ``(b, s)`` ids
    and targets. Every length scores the same bytes, so perplexities at different lengths are comparable."""
    count = tokens // length
    if count < 1 or count * length + 1 > len(text):
        raise ValueError(f"cannot cut {tokens} tokens of held-out text ({len(text)} bytes) into windows of {length}")
    chunk = text[: count * length + 1]
    return chunk[:-1].view(count, length), chunk[1:].view(count, length)


def repeat_batch(
    batch: int, length: int, generator: torch.Generator, periods: tuple[int, int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The copy task: ids ``(b, s)`` repeating a block of ``p`` distinct bytes, and targets ``(b, s)``.

    ``p`` is uniform in ``periods = (low, high)`` (inclusive; default ``(s/8, s/2)``). ``targets[n, t]`` is
    ``ids[n, t + 1]`` where that token repeats an earlier one (``t + 1 >= p``) and :data:`IGNORE` elsewhere.
    """
    low, high = periods or (length // 8, length // 2)
    if not 1 <= low <= high < length or high > VOCAB_SIZE:
        raise ValueError(
            f"periods must satisfy 1 <= low <= high < length={length} and high <= {VOCAB_SIZE}, got {(low, high)}"
        )
    p = torch.randint(low, high + 1, (batch,), generator=generator)
    blocks = torch.rand(batch, VOCAB_SIZE, generator=generator).argsort(dim=1)  # a random permutation per row
    t = torch.arange(length)
    ids = blocks.gather(1, t[None, :] % p[:, None])
    targets = torch.full_like(ids, IGNORE)
    targets[:, :-1] = torch.where(t[None, 1:] >= p[:, None], ids[:, 1:], IGNORE)
    return ids, targets


def passkey_batch(
    text: torch.Tensor, batch: int, length: int, generator: torch.Generator, control: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Passkey retrieval: ids ``(b, s)`` and targets ``(b, s)`` that score only the final five digits.

    Row ``n``: ``pass key: KKKKK`` + newline, held-out text from a random offset, newline + ``pass key: KKKKK``.
    The key sits ``s - 14`` tokens before its repeat. With ``control=True`` the first key is replaced by another
    random one, so the final digits cannot be retrieved: the accuracy then is what the model guesses unaided.
    """
    head = len(KEY_PREFIX) + KEY_DIGITS + 1
    filler_len = length - 2 * head + 1
    if filler_len < 1:
        raise ValueError(f"length must be at least {2 * head} for a passkey sequence, got {length}")
    digits = torch.randint(0, 10, (batch, KEY_DIGITS), generator=generator) + ord("0")
    first = (
        (digits + torch.randint(1, 10, (batch, KEY_DIGITS), generator=generator) - ord("0")) % 10 + ord("0")
        if control
        else digits
    )
    prefix = torch.tensor(list(KEY_PREFIX)).expand(batch, -1)
    newline = torch.full((batch, 1), ord("\n"))
    starts = torch.randint(0, len(text) - filler_len, (batch,), generator=generator)
    filler = text[starts[:, None] + torch.arange(filler_len)]
    seq = torch.cat((prefix, first, newline, filler, newline, prefix, digits), dim=1)  # (b, s + 1)
    targets = torch.full((batch, length), IGNORE)
    targets[:, -KEY_DIGITS:] = seq[:, -KEY_DIGITS:]
    return seq[:, :-1], targets
