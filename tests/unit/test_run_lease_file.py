"""The lease file's own rules, checked on the physical `trainer.lease` and its lock in this
process: what the file says while held and after release, what `lease_state` and
`current_holder` tell a reader, and the refusals' wording."""

from __future__ import annotations

import asyncio
import errno
import gc
import json
import logging
import os
import socket
import stat
import weakref
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from arthex.adapters.run_files import lease as lease_module
from arthex.adapters.run_files.lease import FileRunLeases, current_holder, lease_state
from arthex.core.errors import DiskFullError, InvalidInputError, RunBusyError
from arthex.core.identity import RunRef
from arthex.ports.training_backend import LeaseHolder

RUN = RunRef("proj", "agent-001")


def lease_file(tmp_path: Path, text: str) -> tuple[FileRunLeases, Path]:
    leases = FileRunLeases(str(tmp_path))
    path = leases.path(RUN)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return leases, path


def test_a_held_lease_file_is_one_json_line_naming_this_process_and_release_empties_it(
    tmp_path: Path,
) -> None:
    leases = FileRunLeases(str(tmp_path))
    path = tmp_path / "proj" / "models" / "agent-001" / "trainer.lease"
    assert leases.path(RUN) == path
    lease = leases.acquire_now(RUN, registered_at="train.py:12")
    text = path.read_bytes()
    assert text.endswith(b"\n") and text.count(b"\n") == 1
    assert json.loads(text) == {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started_at": lease.holder.started_at,
        "registered_at": "train.py:12",
    }
    assert lease.path == path
    assert lease_state(path) == ("held", lease.holder)
    assert current_holder(path) == lease.holder
    lease.release_now()
    assert not lease.held
    assert path.read_bytes() == b""
    assert lease_state(path) == ("free", None)
    assert current_holder(path) is None
    lease.release_now()  # a second release is a no-op


def test_a_second_acquire_in_this_process_names_where_the_first_registered(
    tmp_path: Path,
) -> None:
    leases = FileRunLeases(str(tmp_path))
    lease = leases.acquire_now(RUN, registered_at="train.py:12")
    try:
        with pytest.raises(RunBusyError) as caught:
            leases.acquire_now(RUN)
        assert str(caught.value).startswith(
            f"{RUN} is being trained by another model of this process (pid {os.getpid()} on "
            f"host {socket.gethostname()!r}), registered at train.py:12 and still open"
        )
        assert str(caught.value).endswith(f". Lease: {lease.path}")
    finally:
        lease.release_now()


def test_lease_state_of_an_absent_a_stale_and_a_foreign_lease(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert lease_state(tmp_path / "none.lease") == ("free", None)
    assert current_holder(tmp_path / "none.lease") is None
    here = {"pid": 1, "host": socket.gethostname(), "started_at": "then"}
    _, path = lease_file(tmp_path, json.dumps(here))
    stale = LeaseHolder(pid=1, host=socket.gethostname(), started_at="then", registered_at="")
    assert lease_state(path) == ("stale", stale)
    path.write_text(json.dumps({**here, "host": "elsewhere", "registered_at": "r.py:3"}))
    foreign = LeaseHolder(pid=1, host="elsewhere", started_at="then", registered_at="r.py:3")
    assert lease_state(path) == ("elsewhere", foreign)
    path.write_text("  \n")
    assert lease_state(path) == ("free", None)
    with caplog.at_level(logging.WARNING, logger="arthex"):
        path.write_text('{"pid": "x"}')
        assert lease_state(path) == ("free", None)
    assert [r.getMessage() for r in caplog.records] == [
        f'the lease file {path} is unreadable: b\'{{"pid": "x"}}\''
    ]


def test_a_stale_lease_on_this_host_is_taken_over_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    here = {"pid": 1, "host": socket.gethostname(), "started_at": "then"}
    leases, path = lease_file(tmp_path, json.dumps(here))
    with caplog.at_level(logging.WARNING, logger="arthex"):
        lease = leases.acquire_now(RUN)
    try:
        assert json.loads(path.read_text())["pid"] == os.getpid()
        assert json.loads(path.read_text())["registered_at"] == ""
        assert [r.getMessage() for r in caplog.records] == [
            f"taking over the lease of {RUN} from pid 1 on host {socket.gethostname()!r} "
            "(since then), which no longer holds it (its process is gone)"
        ]
    finally:
        lease.release_now()


def test_the_lease_file_is_created_readable_by_all_and_written_by_its_owner(
    tmp_path: Path,
) -> None:
    old = os.umask(0o022)
    try:
        lease = asyncio.run(FileRunLeases(str(tmp_path)).acquire(RUN))
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(lease.path.stat().st_mode) == 0o644
        assert json.loads(lease.path.read_text())["registered_at"] == ""
        started = datetime.fromisoformat(lease.holder.started_at)
        assert started.utcoffset() == timedelta(0)  # UTC, as another host reads it
    finally:
        asyncio.run(lease.release())


def test_a_released_lease_is_not_kept_alive_and_one_still_held_is_released_at_exit(
    tmp_path: Path,
) -> None:
    leases = FileRunLeases(str(tmp_path))
    released = leases.acquire_now(RUN)
    released.release_now()
    gone = weakref.ref(released)
    del released
    gc.collect()
    assert gone() is None
    held = leases.acquire_now(RUN)
    lease_module._release_at_exit()  # what the interpreter runs at exit
    assert not held.held
    assert held.path.read_bytes() == b""


def test_a_busy_lease_whose_text_is_unreadable_is_refused_as_another_process_starting_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    leases = FileRunLeases(str(tmp_path))
    lease = leases.acquire_now(RUN)
    try:
        path = lease.path
        path.write_text("x" * 300)  # the lock stays with the open descriptor
        with (
            caplog.at_level(logging.WARNING, logger="arthex"),
            pytest.raises(RunBusyError) as caught,
        ):
            leases.acquire_now(RUN)
        assert str(caught.value) == (
            f"{RUN} is being trained by another process (starting up): one trainer per run. "
            "Stop that trainer (or `await model.close()` it) first; evaluators can still "
            f"`Model.log` alongside it. Lease: {path}"
        )
        assert [r.getMessage() for r in caplog.records] == [
            f"the lease file {path} is unreadable: {b'x' * 200!r}"
        ]
    finally:
        lease.release_now()


def test_an_unreadable_free_lease_is_named_in_the_warning_when_taken_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    leases, path = lease_file(tmp_path, "not a lease")
    with caplog.at_level(logging.WARNING, logger="arthex"):
        assert current_holder(path) is None
        leases.acquire_now(RUN).release_now()
    assert [r.getMessage() for r in caplog.records] == [
        f"the lease file {path} is unreadable: b'not a lease'"
    ] * 2


def test_a_run_directory_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    leases = FileRunLeases(str(tmp_path))
    where = leases.path(RUN).parent
    where.parent.mkdir(parents=True)
    where.write_text("a file where the run's folder goes")
    with pytest.raises(InvalidInputError) as caught:
        leases.acquire_now(RUN)
    assert str(caught.value) == (
        f"cannot write the run's files under {where} (File exists): make it writable, or pass "
        "a base_path you can write to"
    )


def _no_space(*args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_when_the_lease_file_is_created_says_the_bytes_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leases = FileRunLeases(str(tmp_path))
    monkeypatch.setattr(os, "open", _no_space)
    with pytest.raises(DiskFullError, match=rf"of {leases.path(RUN)}: the write needs 256 bytes"):
        leases.acquire_now(RUN)


def test_a_full_disk_when_the_holder_is_written_says_the_lines_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leases = FileRunLeases(str(tmp_path))
    monkeypatch.setattr(os, "fsync", _no_space)
    with pytest.raises(DiskFullError) as caught:
        leases.acquire_now(RUN, registered_at="r.py:1")
    monkeypatch.undo()
    line = json.dumps(
        {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": "2026-01-01T00:00:00.000000+00:00",  # the length of any UTC stamp
            "registered_at": "r.py:1",
        }
    )
    assert f"of {leases.path(RUN)}: the write needs {len(line) + 1} bytes" in str(caught.value)
    assert lease_state(leases.path(RUN))[0] != "held"  # the lock went with the descriptor


def test_a_busy_lease_names_the_holder_its_file_names(tmp_path: Path) -> None:
    leases = FileRunLeases(str(tmp_path))
    lease = leases.acquire_now(RUN)
    try:
        # the lock stays with the open descriptor; the text now names someone else
        lease.path.write_text(json.dumps({"pid": 1, "host": "h", "started_at": "then"}))
        with pytest.raises(RunBusyError) as caught:
            leases.acquire_now(RUN)
        assert str(caught.value).startswith(
            f"{RUN} is being trained by pid 1 on host 'h' (since then): one trainer per run."
        )
    finally:
        lease.release_now()
