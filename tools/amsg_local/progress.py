"""One progress line for long command-line work (``amsg import``, ``amsg tenants delete --wait``, ``bench capacity``).

On a terminal the line is redrawn in place, at most every ``interval_s``, and erased or finished when the work
ends; in a pipe or a file it writes nothing, so scripts and logs see only the command's result. A command whose
log should still show how far it got (``amsg import``, which can run for hours) passes ``every``: then in a pipe
every ``every``-th count and each finished line are written as ordinary lines.

A leaf module (standard library only), so every command and the benchmarks share it without importing each other.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]

_ERASE = "\x1b[K"  # erase to the end of the line: a shorter line leaves nothing of the longer one behind


class Progress:
    """``update(text)`` while working, ``done(text)`` (or ``done()`` to erase the line) when finished."""

    def __init__(self, stream: TextIO | None = None, *, every: int = 0, interval_s: float = 0.1) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = every
        self.interval_s = interval_s
        self._last = 0.0
        self._drawn = False

    def update(self, text: str, count: int = 0) -> None:
        """Show ``text`` now (rate-limited on a terminal); in a pipe only every ``every``-th ``count``."""
        if self.tty:
            now = time.monotonic()
            if now - self._last >= self.interval_s:
                self._last = now
                self._drawn = True
                self.stream.write("\r" + text + _ERASE)
                self.stream.flush()
        elif self.every and count and count % self.every == 0:
            self.stream.write(text + "\n")
            self.stream.flush()

    def done(self, text: str | None = None) -> None:
        """End the line: ``text`` as the last state (kept on a terminal; in a pipe only with ``every``), or,
        without ``text``, erase what was drawn."""
        if self.tty:
            if text is not None:
                self.stream.write("\r" + text + _ERASE + "\n")
            elif self._drawn:
                self.stream.write("\r" + _ERASE)
            self.stream.flush()
        elif text is not None and self.every:
            self.stream.write(text + "\n")
            self.stream.flush()
        self._drawn = False
        self._last = 0.0
