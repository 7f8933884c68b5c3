"""The run's diagnostics reports (`{run}/diagnostics/`): the hang watchdog's stack dumps."""

from __future__ import annotations

from ...core.identity import RunRef
from ..files import atomic_write_bytes
from ..layout import RunLayout


class DiagnosticsFiles:
    """Writes a report into a run's `diagnostics/` folder, atomically (a reader never sees a
    half-written report); returns its path."""

    def __init__(self, base_path: str) -> None:
        self._base = str(base_path)

    def __call__(self, run: RunRef, name: str, text: str) -> str:
        path = RunLayout.of(self._base, run).diagnostic(name)
        atomic_write_bytes(path, text.encode("utf-8"))
        return str(path)
