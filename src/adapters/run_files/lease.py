"""FileRunLeases: a run's lease is `trainer.lease` in its directory, under an `flock`.

The file names the holder (pid, host, start time) as JSON; the holder keeps an exclusive
`flock` on it for as long as it holds the lease. The lock, not the text, says whether the
lease is held: the kernel drops it when the holder's process dies, however it dies (SIGKILL
included), so on one host a dead holder is recognised without guessing from pids, which the
system reuses. The text is for the people and processes that find the lease taken:

- lock taken by someone else: a live trainer on this host holds the run; RunBusyError names it
  (another model of this very process, and where it was registered, when the file says so:
  `flock` locks of two descriptors exclude each other within one process too).
- lock free, file names this host: its holder died; the lease is taken over (one warning).
- lock free, file names another host: on a shared file system the lock may not reach across
  hosts, so a live trainer there cannot be ruled out; RunBusyError names it and says which
  file to delete once that trainer is known to be gone.
- lock free, file empty: released cleanly; taken.

Release empties the file and drops the lock (the file stays: unlinking a locked file lets a
second process lock a fresh inode while a third still holds the old one). A process that
exits without closing its model releases at exit; one that is killed leaves the text, which
the next trainer on the host takes over.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ...core.errors import RunBusyError
from ...core.identity import RunRef
from ...ports.training_backend import LeaseHolder, held_by_this_process
from ..files import disk_full, full_disk_said, is_disk_full, unwritable_directory_error
from ..layout import RunLayout

if TYPE_CHECKING:
    from ...ports.training_backend import HeldLease, RunLeases

logger = logging.getLogger("arthex")

_MAX_LEASE_BYTES = 4096
_LEASE_BYTES = 256  # about what a holder's line takes


class FileLease:
    """A held lease: the open, locked lease file. `release()` (or process exit) gives it back."""

    def __init__(self, fd: int, path: Path, holder: LeaseHolder) -> None:
        self._fd: int | None = fd
        self._path = path
        self._holder = holder
        self._lock = threading.RLock()  # a finalizer may run while this thread releases
        _HELD.add(self)

    @property
    def holder(self) -> LeaseHolder:
        return self._holder

    @property
    def path(self) -> Path:
        return self._path

    @property
    def held(self) -> bool:
        return self._fd is not None

    async def release(self) -> None:
        await asyncio.to_thread(self.release_now)

    def release_now(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
            _HELD.discard(self)
            if fd is None:
                return
            try:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
                    os.fsync(fd)
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


class FileRunLeases:
    """Leases at `{root}/{project}/models/{name}/trainer.lease` (the history's root)."""

    def __init__(self, root: str) -> None:
        self._root = Path(root)

    def path(self, run: RunRef) -> Path:
        return RunLayout.of(self._root, run).lease

    async def acquire(self, run: RunRef, *, registered_at: str = "") -> FileLease:
        return await asyncio.to_thread(self.acquire_now, run, registered_at=registered_at)

    def acquire_now(self, run: RunRef, *, registered_at: str = "") -> FileLease:
        path = self.path(run)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if is_disk_full(exc):
                raise disk_full(path, _LEASE_BYTES) from exc
            raise unwritable_directory_error(path.parent, exc) from exc
        try:
            return _take(fd, run, path, registered_at)
        except BaseException:
            os.close(fd)  # drops the lock too, if it was taken
            raise


def current_holder(path: Path) -> LeaseHolder | None:
    """Who the lease file at `path` names (None: free or absent). Says nothing about whether
    that holder is alive: only the lock does."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        return _read_holder(fd, path)
    finally:
        os.close(fd)


LeaseState = Literal["free", "held", "stale", "elsewhere"]


def lease_state(path: Path) -> tuple[LeaseState, LeaseHolder | None]:
    """Whether the lease at `path` is held, without taking it: "free" (absent or released),
    "held" (its lock is taken: a live trainer on this host), "stale" (the file names a holder
    on this host but nobody holds the lock: that process is gone, and the next trainer takes
    the lease over) or "elsewhere" (names another host, whose lock may not reach here).

    The lock is probed with a shared, non-blocking `flock` dropped at once: it never blocks a
    live holder, and a trainer starting in that instant is told the run is busy, as it would
    be by a second trainer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return "free", None
    try:
        holder = _read_holder(fd, path)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            return "held", holder
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    if holder is None:
        return "free", None
    return ("stale" if holder.host == socket.gethostname() else "elsewhere"), holder


def _take(fd: int, run: RunRef, path: Path, registered_at: str) -> FileLease:
    me = LeaseHolder(
        pid=os.getpid(),
        host=socket.gethostname(),
        started_at=datetime.now(UTC).isoformat(),
        registered_at=registered_at,
    )
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        holder = _read_holder(fd, path)
        if holder is not None and holder.is_this_process():
            raise RunBusyError(f"{held_by_this_process(run, holder)}. Lease: {path}") from None
        who = holder.describe() if holder is not None else "another process (starting up)"
        raise RunBusyError(
            f"{run} is being trained by {who}: one trainer per run. Stop that trainer (or "
            "`await model.close()` it) first; evaluators can still `Model.log` alongside it. "
            f"Lease: {path}"
        ) from None
    previous = _read_holder(fd, path)
    if previous is not None and previous.host != me.host:
        raise RunBusyError(
            f"{run} is leased to {previous.describe()}, another host; whether that trainer "
            f"still runs cannot be checked from {me.host!r}. Once it is known to be gone, "
            f"delete {path} and register again."
        )
    if previous is not None:
        logger.warning(
            "taking over the lease of %s from %s, which no longer holds it (its process is gone)",
            run,
            previous.describe(),
        )
    data = json.dumps(
        {
            "pid": me.pid,
            "host": me.host,
            "started_at": me.started_at,
            "registered_at": me.registered_at,
        }
    ).encode()
    with full_disk_said(path, len(data) + 1):  # the caller closes fd: the lock goes with it
        os.ftruncate(fd, 0)
        os.pwrite(fd, data + b"\n", 0)
        os.fsync(fd)
    return FileLease(fd, path, me)


def _read_holder(fd: int, path: Path) -> LeaseHolder | None:
    """The holder the file names; None when it is empty, or unreadable (a lease written by
    something else: the lock still decides whether it is held)."""
    data = os.pread(fd, _MAX_LEASE_BYTES, 0)
    if not data.strip():
        return None
    try:
        obj: Any = json.loads(data)
        return LeaseHolder(
            pid=int(obj["pid"]),
            host=str(obj["host"]),
            started_at=str(obj["started_at"]),
            registered_at=str(obj.get("registered_at") or ""),
        )
    except (ValueError, KeyError, TypeError):
        logger.warning("the lease file %s is unreadable: %r", path, data[:200])
        return None


# Leases still held when the interpreter exits are released (their files emptied), so a clean
# exit leaves nothing for the next trainer to take over.
_HELD: set[FileLease] = set()


@atexit.register
def _release_at_exit() -> None:
    for lease in list(_HELD):
        with contextlib.suppress(Exception):
            lease.release_now()


if TYPE_CHECKING:
    _fits: type[RunLeases] = FileRunLeases
    _held: type[HeldLease] = FileLease
