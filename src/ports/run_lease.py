"""RunLeases: one trainer per run at a time.

A backend whose checkpoints every process sees (it declares `Capability.ONE_TRAINER`) breaks
when two trainers drive one run: they delete each other's checkpoints and race for step
numbers. The model therefore takes the run's lease at `register` and keeps it until `close`
(or until its process exits). Loggers (`Model.log` from an evaluator) never need it.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from ..core.identity import RunRef


@attrs.frozen
class LeaseHolder:
    """Who holds a run's lease: enough to find the process, and to tell when it is gone."""

    pid: int
    host: str
    started_at: str  # ISO-8601

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host!r} (since {self.started_at})"


class HeldLease(Protocol):
    @property
    def holder(self) -> LeaseHolder: ...

    async def release(self) -> None:
        """Give the run back; calling it twice is harmless."""
        ...


class RunLeases(Protocol):
    async def acquire(self, run: RunRef) -> HeldLease:
        """Take `run`'s lease before anything of the run is written. Raise RunBusyError naming
        the holder when a live trainer holds it; take it over when its holder is dead (same
        host, process gone)."""
        ...
