"""RunStateStore: one small JSON object per run that a training script keeps across restarts
(a dataset cursor, the best score so far), ART's `state.json`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..core.identity import RunRef

StateChange = Callable[[dict[str, Any] | None], dict[str, Any]]


class RunStateStore(Protocol):
    def read(self, run: RunRef) -> dict[str, Any] | None:
        """The run's state, or None when none was ever written."""
        ...

    def update(self, run: RunRef, change: StateChange) -> dict[str, Any]:
        """Replace the state with `change(current)` as one atomic step: two processes updating
        one run at once never lose each other's change, and a reader never sees half a
        state. Returns what was stored."""
        ...
