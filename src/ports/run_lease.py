"""RunLeases: one trainer per run at a time.

A backend whose checkpoints every process sees (it declares `Capability.ONE_TRAINER`) breaks
when two trainers drive one run: they delete each other's checkpoints and race for step
numbers. The model therefore takes the run's lease at `register` and keeps it until `close`,
until the backend it is registered on is closed, until it is garbage-collected, or until its
process exits (see core/lease_book.py). Loggers (`Model.log` from an evaluator) never need it.
"""

from __future__ import annotations

import os
import socket
from typing import Protocol

import attrs

from ..core.identity import RunRef


@attrs.frozen
class LeaseHolder:
    """Who holds a run's lease: enough to find the process, and to tell when it is gone."""

    pid: int
    host: str
    started_at: str  # ISO-8601
    registered_at: str = ""  # where the holder's model was registered ("train.py:31")

    def describe(self) -> str:
        where = f", registered at {self.registered_at}" if self.registered_at else ""
        return f"pid {self.pid} on host {self.host!r} (since {self.started_at}{where})"

    def is_this_process(self) -> bool:
        return self.pid == os.getpid() and self.host == socket.gethostname()


def held_by_this_process(run: RunRef, holder: LeaseHolder) -> str:
    """The refusal when the holder is another model of this very process."""
    where = holder.registered_at or "an unknown place"
    return (
        f"{run} is being trained by another model of this process (pid {holder.pid} on host "
        f"{holder.host!r}), registered at {where} and still open: one trainer per run. Close "
        "that model (`await model.close()`) or its backend (`await backend.close()`) first"
    )


class HeldLease(Protocol):
    @property
    def holder(self) -> LeaseHolder: ...

    async def release(self) -> None:
        """Give the run back; calling it twice is harmless."""
        ...

    def release_now(self) -> None:
        """`release` without an event loop, from any thread: what a finalizer of a model that
        was garbage-collected without `close` calls. Quick; twice is harmless."""
        ...


class RunLeases(Protocol):
    async def acquire(self, run: RunRef, *, registered_at: str = "") -> HeldLease:
        """Take `run`'s lease before anything of the run is written; `registered_at` says
        where (file:line) the model taking it was registered, for the holder's description.
        Raise RunBusyError naming the holder when a live trainer holds it (saying so when
        that is another model of this very process); take it over when its holder is dead
        (same host, process gone)."""
        ...
