"""Progress of long work (building the site and its PDFs, executing and measuring chapters): one line when a step
starts and one when it ends, with the step's number, its elapsed time and the time so far::

    [2/4] html-zh: building the Chinese edition
    [2/4] html-zh: done in 84 s (231 s in all)

Lines rather than a bar, so that a terminal and a CI log read the same; written to stderr and flushed at once, so
that a log piped to a file or captured by CI shows each step as it happens, and stdout keeps only the results.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


class Steps:
    """``total`` steps of one piece of work, announced on ``out`` (default: ``sys.stderr``) as they run."""

    def __init__(self, total: int, out: TextIO | None = None):
        if total < 0:
            raise ValueError(f"total={total}: the number of steps cannot be negative")
        self.total, self.out, self.done = total, out, 0
        self.start = time.monotonic()

    def _say(self, text: str) -> None:
        print(text, file=self.out or sys.stderr, flush=True)

    @contextmanager
    def step(self, name: str, doing: str = "") -> Iterator[None]:
        """Announce step ``name`` (``doing`` says what it does), time it, and say how it ended."""
        number = f"[{self.done + 1}/{self.total}] {name}"
        self._say(f"{number}: {doing}" if doing else f"{number}: started")
        began = time.monotonic()
        try:
            yield
        except BaseException:
            self._say(f"{number}: failed after {time.monotonic() - began:.0f} s")
            raise
        finally:
            self.done += 1
        now = time.monotonic()
        self._say(f"{number}: done in {now - began:.0f} s ({now - self.start:.0f} s in all)")
