"""Text that came from a submission, made safe to show in a terminal, a spreadsheet or a learner's feedback.

A notebook chooses the messages of its exceptions, the names of its types and what its processes print, so every
such text passes through one of these before it is shown: :data:`CONTROL` removes terminal escapes, zero-width
characters, line separators and bidirectional overrides; :func:`quote` keeps one bounded line; :func:`name` keeps
an identifier or nothing; :func:`cell` also stops a spreadsheet from reading a formula. This module imports only
the standard library: the sandbox's copy of :mod:`.probe` uses it too.
"""

from __future__ import annotations

import re
from typing import Any

#: C0 and C1 control characters but tab and newline, zero-width characters and directional marks, the line and
#: paragraph separators, and the bidirectional embeddings, overrides and isolates.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
QUOTE_CHARS = 240  # the most of an exception's message that feedback quotes
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,59}")


def plain(text: Any) -> str:
    """``text`` without control characters, for a terminal or a file."""
    return CONTROL.sub("", str(text))


def bounded(text: Any, limit: int = 160) -> str:
    """``text`` without control characters, whitespace folded, at most ``limit`` characters (cut ones end "...")."""
    text = " ".join(plain(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def quote(text: Any) -> str:
    """``text`` (the learner's own, e.g. an exception's message) as feedback may show it: the first line, without
    control characters, at most :data:`QUOTE_CHARS` characters, cut at a word and marked when cut."""
    first = (text if isinstance(text, str) else "").strip().split("\n", 1)[0]
    text = " ".join(CONTROL.sub(" ", first).split())
    if len(text) <= QUOTE_CHARS:
        return text
    cut = text[:QUOTE_CHARS].rsplit(" ", 1)[0]
    return f"{cut} [...]"


def name(text: Any, default: str = "an object") -> str:
    """A type or exception name from the sandbox, shown only when it is an identifier."""
    return text if isinstance(text, str) and _NAME.fullmatch(text) else default


def cell(text: Any) -> str:
    """``text`` for a spreadsheet cell: no control characters, and quoted with ``'`` where a spreadsheet would
    take it for a formula (a leading ``= + - @``, tab or carriage return)."""
    text = plain(text)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
