"""A one-line progress display for terminals, silent elsewhere (stdlib only: the core
imports no UI library)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressLine:
    """A one-line progress display on a terminal; silent when the stream is not a TTY."""

    def __init__(
        self,
        description: str,
        total: int | None,
        stream: TextIO | None = None,
        enabled: bool | None = None,
    ) -> None:
        self.description = description
        self.total = total
        self.done = 0
        self.failed = 0
        self._stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = bool(getattr(self._stream, "isatty", lambda: False)())
        self.enabled = enabled
        self._started = time.monotonic()

    def advance(self, done: int = 1, failed: int = 0, note: str = "") -> None:
        self.done += done
        self.failed += failed
        if self.enabled:
            elapsed = time.monotonic() - self._started
            if self.total is None:  # open-ended: a count, no bar
                line = f"{self.description} {self.done}"
            else:
                width = 24
                filled = width * self.done // max(self.total, 1)
                line = (
                    f"{self.description} [{'#' * filled}{'.' * (width - filled)}] "
                    f"{self.done}/{self.total} failed={self.failed}"
                )
            self._stream.write(f"\r{line} {elapsed:5.1f}s {note}".rstrip())
            self._stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._stream.write("\n")
            self._stream.flush()
