"""The RunLeases contract: subclass, override `leases` (and `abandon`), get the whole suite.

    class TestMyLeases(RunLeasesContract):
        @pytest.fixture
        def leases(self, tmp_path):
            return MyLeases(tmp_path)

        def abandon(self, leases, run, lease):
            ...  # make `lease` look like its holder died without releasing it

Each test gets fresh leases from the fixture. One instance stands for one host.
"""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from ...core.errors import RunBusyError
from ...core.identity import RunRef
from ...ports.run_lease import HeldLease, RunLeases

RUN = RunRef("contract-project", "leased")
OTHER = RunRef("contract-project", "other")


class RunLeasesContract:
    @pytest.fixture
    def leases(self) -> RunLeases:
        raise NotImplementedError("override the `leases` fixture")

    def abandon(self, leases: RunLeases, run: RunRef, lease: HeldLease) -> None:
        """Make `lease` look held by a process that died (override)."""
        raise NotImplementedError("override `abandon`")

    def _acquire(self, leases: RunLeases, run: RunRef) -> HeldLease:
        return asyncio.run(leases.acquire(run))

    def test_the_holder_is_this_process_on_this_host(self, leases: RunLeases) -> None:
        lease = self._acquire(leases, RUN)
        assert lease.holder.host == socket.gethostname()
        assert lease.holder.pid > 0
        assert lease.holder.started_at
        asyncio.run(lease.release())

    def test_a_second_acquire_is_refused_naming_the_holder(self, leases: RunLeases) -> None:
        lease = self._acquire(leases, RUN)
        with pytest.raises(RunBusyError, match=f"pid {lease.holder.pid}"):
            self._acquire(leases, RUN)
        asyncio.run(lease.release())

    def test_a_released_lease_can_be_taken_again(self, leases: RunLeases) -> None:
        lease = self._acquire(leases, RUN)
        asyncio.run(lease.release())
        asyncio.run(lease.release())  # twice is harmless
        again = self._acquire(leases, RUN)
        asyncio.run(again.release())

    def test_runs_are_leased_separately(self, leases: RunLeases) -> None:
        first = self._acquire(leases, RUN)
        second = self._acquire(leases, OTHER)
        for lease in (first, second):
            asyncio.run(lease.release())

    def test_a_dead_holders_lease_is_taken_over(self, leases: RunLeases) -> None:
        lease = self._acquire(leases, RUN)
        self.abandon(leases, RUN, lease)
        taken = self._acquire(leases, RUN)
        assert taken.holder.host == socket.gethostname()
        assert taken.holder.pid in (os.getpid(), lease.holder.pid + 1)
        asyncio.run(taken.release())

    def test_release_now_gives_the_run_back_without_an_event_loop(self, leases: RunLeases) -> None:
        lease = self._acquire(leases, RUN)
        lease.release_now()  # what a collected model's finalizer calls
        lease.release_now()  # twice is harmless
        again = self._acquire(leases, RUN)
        asyncio.run(again.release())

    def test_the_holder_says_where_its_model_was_registered(self, leases: RunLeases) -> None:
        lease = asyncio.run(leases.acquire(RUN, registered_at="train.py:31"))
        assert lease.holder.registered_at == "train.py:31"
        with pytest.raises(RunBusyError, match=r"train\.py:31"):
            self._acquire(leases, RUN)
        asyncio.run(lease.release())
