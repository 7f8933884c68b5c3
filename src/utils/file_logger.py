"""ART's `FileLogger` (`art.langgraph.logging`): named entries appended to a text file as
`{name}: {entry}` lines, and kept in memory, in order, for `load_logs()`.

ART's LangGraph wrapper logs each chat call's input and output through one; arthex records a
LangGraph rollout's calls with its capture instead (arthex.composition.langgraph), so here
the logger is the plain utility. Each line is written with one append (O_APPEND), so lines
from several loggers on one file never interleave within a line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..core.errors import InvalidInputError

__all__ = ["FileLogger"]


class FileLogger:
    """Append `{name}: {entry}` lines (the entry as `str()` gives it) to `filepath`, created
    on the first `log`; its folder must exist."""

    def __init__(self, filepath: str | os.PathLike[str]) -> None:
        if not isinstance(filepath, str | os.PathLike) or not os.fspath(filepath):
            raise InvalidInputError(f"FileLogger needs a file path, got {filepath!r}")
        if Path(filepath).is_dir():
            raise InvalidInputError(f"FileLogger's path {os.fspath(filepath)!r} is a folder")
        self.text_path = filepath
        self._logs: list[tuple[str, Any]] = []

    def log(self, name: str, entry: Any) -> None:
        """Append the line, then keep `(name, entry)` (not kept if the write failed)."""
        line = f"{name}: {entry}\n".encode()
        descriptor = os.open(self.text_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(descriptor, line)
            if written != len(line):  # a full disk may take part of it: say so, keep nothing
                raise OSError(
                    f"FileLogger wrote {written} of {len(line)} bytes to {self.text_path!s}"
                )
        finally:
            os.close(descriptor)
        self._logs.append((name, entry))

    def load_logs(self) -> list[tuple[str, Any]]:
        """Every `(name, entry)` this logger logged, oldest first (a new list)."""
        return list(self._logs)
