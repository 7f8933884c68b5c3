"""The RunLeases kit against the lease file and the in-memory fake; the file's own rules."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from arthex.adapters.run_files.lease import FileLease, FileRunLeases, current_holder
from arthex.core.errors import RunBusyError
from arthex.core.identity import RunRef
from arthex.ports.training_backend import HeldLease, RunLeases
from arthex.testing.contracts.run_lease import RUN, RunLeasesContract
from arthex.testing.fakes.leases import InMemoryRunLeases


class TestFileRunLeases(RunLeasesContract):
    @pytest.fixture
    def leases(self, tmp_path: Path) -> RunLeases:
        return FileRunLeases(str(tmp_path))

    def abandon(self, leases: RunLeases, run: RunRef, lease: HeldLease) -> None:
        # What the kernel does when the holder dies: its descriptor closes and the lock goes,
        # the text stays.
        assert isinstance(lease, FileLease)
        fd = lease._fd
        assert fd is not None
        lease._fd = None
        os.close(fd)


class TestInMemoryRunLeases(RunLeasesContract):
    @pytest.fixture
    def leases(self) -> RunLeases:
        return InMemoryRunLeases()

    def abandon(self, leases: RunLeases, run: RunRef, lease: HeldLease) -> None:
        assert isinstance(leases, InMemoryRunLeases)
        leases.abandon(run)


def _hold(root: str, ready: Connection) -> None:
    lease = FileRunLeases(root).acquire_now(RUN)
    ready.send(lease.holder.pid)
    signal.pause()  # until killed


def test_a_lease_held_by_another_process_names_it_and_is_taken_over_after_sigkill(
    tmp_path: Path,
) -> None:
    leases = FileRunLeases(str(tmp_path))
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    holder = context.Process(target=_hold, args=(str(tmp_path), send), daemon=True)
    holder.start()
    try:
        send.close()
        assert receive.poll(60)
        pid = receive.recv()
        assert pid == holder.pid
        with pytest.raises(RunBusyError, match=f"pid {pid} on host"):
            leases.acquire_now(RUN)
        named = current_holder(leases.path(RUN))
        assert named is not None
        assert named.pid == pid
        os.kill(pid, signal.SIGKILL)
        holder.join(30)
    finally:
        if holder.is_alive():
            holder.kill()
            holder.join()
    taken = leases.acquire_now(RUN)
    assert taken.holder.pid == os.getpid()
    assert json.loads(leases.path(RUN).read_text())["pid"] == os.getpid()
    taken.release_now()
    assert leases.path(RUN).read_text() == ""  # released: empty, not deleted
    assert current_holder(leases.path(RUN)) is None


def test_a_lease_naming_another_host_is_not_taken_over(tmp_path: Path) -> None:
    leases = FileRunLeases(str(tmp_path))
    path = leases.path(RUN)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"pid": 1, "host": "elsewhere", "started_at": "then"}))
    with pytest.raises(RunBusyError, match=rf"'elsewhere'.*delete {path}"):
        leases.acquire_now(RUN)
    assert json.loads(path.read_text())["host"] == "elsewhere"  # untouched


def test_an_unreadable_lease_file_with_its_lock_free_is_taken_over(tmp_path: Path) -> None:
    leases = FileRunLeases(str(tmp_path))
    path = leases.path(RUN)
    path.parent.mkdir(parents=True)
    path.write_text("not a lease")
    lease = leases.acquire_now(RUN)
    assert lease.holder.pid == os.getpid()
    asyncio.run(lease.release())
