"""InMemoryRunLeases: run leases in a dict, run against the same contract as FileRunLeases.

One instance stands for one host: leases taken through it exclude each other, and
`abandon(run)` plays a holder's process dying without releasing (the next `acquire` takes
it over, as on a host whose kernel dropped the dead process's lock).
"""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ...core.errors import RunBusyError
from ...core.identity import RunRef
from ...ports.run_lease import LeaseHolder

if TYPE_CHECKING:
    from ...ports.run_lease import HeldLease, RunLeases


class InMemoryLease:
    def __init__(self, owner: InMemoryRunLeases, run: RunRef, holder: LeaseHolder) -> None:
        self._owner, self._run, self._holder = owner, run, holder

    @property
    def holder(self) -> LeaseHolder:
        return self._holder

    async def release(self) -> None:
        self.release_now()

    def release_now(self) -> None:
        if self._owner.held.get(self._run) is self:
            del self._owner.held[self._run]


class InMemoryRunLeases:
    def __init__(self) -> None:
        self.held: dict[RunRef, InMemoryLease] = {}
        self._next_pid = os.getpid()

    async def acquire(self, run: RunRef, *, registered_at: str = "") -> InMemoryLease:
        current = self.held.get(run)
        if current is not None:
            raise RunBusyError(
                f"{run} is being trained by {current.holder.describe()}: one trainer per run"
            )
        holder = LeaseHolder(
            pid=self._next_pid,
            host=socket.gethostname(),
            started_at=datetime.now(UTC).isoformat(),
            registered_at=registered_at,
        )
        self._next_pid += 1  # each lease stands for its own trainer process
        lease = InMemoryLease(self, run, holder)
        self.held[run] = lease
        return lease

    def abandon(self, run: RunRef) -> None:
        """The holder of `run`'s lease died without releasing it."""
        self.held.pop(run, None)


if TYPE_CHECKING:
    _fits: type[RunLeases] = InMemoryRunLeases
    _held: type[HeldLease] = InMemoryLease
