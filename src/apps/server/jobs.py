"""Training jobs' event logs: appended durably, read with a cursor, kept until read.

Each job has a folder `{root}/{job_id}/` with `job.json` (who, which model, when the terminal
event was first read) and `events.jsonl` (one event per line, fsynced as it is appended).
Event ids are 1, 2, 3, ...; a cursor is the id of the last event a reader has seen, and
`after=cursor` returns exactly the events it has not. A restarted server reloads every job, and
a job that was running when the server stopped gets a `training_failed` event saying so, so a
client waiting on it is never left hanging. A job's folder is removed `retention_s` after its
terminal event was first read; a job whose end nobody has read is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from ...adapters.files import atomic_write_bytes, fsync_dir, full_disk_said
from ...adapters.serverless.wire import JOB_ID, TERMINAL_EVENTS, TRAINING_FAILED, now_iso
from ...core.errors import CorruptDataError

DEFAULT_RETENTION_S = 24 * 3600.0
INTERRUPTED = (
    "the training server stopped while this job ran; the step it was training was not "
    "saved (finished checkpoints are kept): train the same groups again"
)


class JobLog:
    """One job: its events in memory and on disk, and a way to wait for the next one."""

    def __init__(self, directory: Path, meta: dict[str, Any], events: list[dict[str, Any]]):
        self.directory = directory
        self.meta = meta
        self.events = events
        self._changed = asyncio.Event()
        # when the terminal event was read, on the monotonic clock (retention is decided on
        # it, so a wall clock that jumps neither deletes a job early nor keeps it on); the
        # wall time in `meta` only carries the age across a restart
        self.read_at: float | None = None
        stamped = meta.get("terminal_read_at")
        if isinstance(stamped, int | float):
            self.read_at = time.monotonic() - max(0.0, time.time() - float(stamped))

    @property
    def id(self) -> str:
        return str(self.meta["id"])

    @property
    def tenant(self) -> str:
        return str(self.meta["tenant"])

    @property
    def model_id(self) -> str:
        return str(self.meta["model_id"])

    @property
    def finished(self) -> bool:
        return bool(self.events) and self.events[-1]["type"] in TERMINAL_EVENTS

    @property
    def status(self) -> str:
        if not self.finished:
            return "running"
        return "failed" if self.events[-1]["type"] == TRAINING_FAILED else "succeeded"

    def append(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        if self.finished:
            raise RuntimeError(f"job {self.id} has already ended")
        event = {
            "id": str(len(self.events) + 1),
            "object": "training_job.event",
            "type": kind,
            "data": data,
            "created_at": now_iso(),
        }
        line = (json.dumps(event, allow_nan=False) + "\n").encode()
        path = self.directory / "events.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            try:
                with full_disk_said(path, len(line)):
                    if os.write(fd, line) != len(line):
                        raise OSError(errno.ENOSPC, "short write", str(path))
                    os.fsync(fd)
            except BaseException:
                with contextlib.suppress(OSError):  # no half event for a reader to trip on
                    os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)
        self.events.append(event)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        return event

    def after(self, cursor: int, limit: int) -> tuple[list[dict[str, Any]], bool]:
        """Events with id > cursor, at most `limit`, and whether more follow them."""
        chosen = self.events[cursor : cursor + limit]
        return chosen, cursor + limit < len(self.events)

    async def wait(self, cursor: int, seconds: float) -> None:
        """Return once an event after `cursor` exists, or after `seconds`."""
        deadline = time.monotonic() + seconds
        while len(self.events) <= cursor and not self.finished:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    def mark_read(self) -> None:
        """The terminal event was delivered: start the retention clock (once)."""
        if self.meta.get("terminal_read_at") is None:
            self.meta["terminal_read_at"] = time.time()
            self.read_at = time.monotonic()
            _write_meta(self.directory, self.meta)

    def public(self) -> dict[str, Any]:
        last = self.events[-1] if self.events else None
        return {
            "id": self.id,
            "object": "training_job",
            "model_id": self.model_id,
            "status": self.status,
            "created_at": self.meta.get("created_at"),
            "num_events": len(self.events),
            "result": last["data"] if last is not None and self.finished else None,
        }


class JobStore:
    """Every job under `root`; a tenant finds only its own."""

    def __init__(self, root: Path, retention_s: float = DEFAULT_RETENTION_S) -> None:
        self.root = root
        self.retention_s = retention_s
        self._jobs: dict[str, JobLog] = {}

    def load(self) -> list[JobLog]:
        """Read every job back; end the ones that were running. Returns those it ended."""
        self.root.mkdir(parents=True, exist_ok=True)
        interrupted = []
        for directory in sorted(self.root.iterdir()):
            if not directory.is_dir() or JOB_ID.fullmatch(directory.name) is None:
                continue
            job = _read_job(directory)
            if job is None:
                shutil.rmtree(directory, ignore_errors=True)  # created but never announced
                continue
            self._jobs[job.id] = job
            if not job.finished:
                job.append(
                    TRAINING_FAILED,
                    {"error_message": INTERRUPTED, "message": INTERRUPTED, "type": "Interrupted"},
                )
                interrupted.append(job)
        self.prune()
        return interrupted

    def create(self, tenant: str, model_id: str) -> JobLog:
        self.prune()
        job_id = "j" + secrets.token_hex(12)
        directory = self.root / job_id
        directory.mkdir(parents=True)
        meta = {
            "id": job_id,
            "tenant": tenant,
            "model_id": model_id,
            "created_at": now_iso(),
            "terminal_read_at": None,
        }
        _write_meta(directory, meta)
        (directory / "events.jsonl").touch(mode=0o600)
        fsync_dir(directory)
        job = JobLog(directory, meta, [])
        self._jobs[job_id] = job
        return job

    def get(self, tenant: str, job_id: str) -> JobLog | None:
        job = self._jobs.get(job_id)
        return job if job is not None and job.tenant == tenant else None

    def prune(self) -> None:
        cutoff = time.monotonic() - self.retention_s
        for job in list(self._jobs.values()):
            if job.finished and job.read_at is not None and job.read_at < cutoff:
                shutil.rmtree(job.directory, ignore_errors=True)
                del self._jobs[job.id]


def _write_meta(directory: Path, meta: dict[str, Any]) -> None:
    atomic_write_bytes(directory / "job.json", json.dumps(meta).encode())


def _read_job(directory: Path) -> JobLog | None:
    try:
        meta = json.loads((directory / "job.json").read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CorruptDataError(f"job file {directory / 'job.json'} cannot be read: {exc}") from exc
    path = directory / "events.jsonl"
    events: list[dict[str, Any]] = []
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raw = b""
    lines = raw.split(b"\n")
    complete, tail = lines[:-1], lines[-1]
    for number, line in enumerate(complete, start=1):
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise CorruptDataError(f"{path}, line {number}, is not JSON: {exc}") from exc
        events.append(event)
    if tail:
        # A crash in the middle of an append: that event was never announced; drop it so the
        # next append starts on a fresh line.
        atomic_write_bytes(path, b"".join(line + b"\n" for line in complete))
    return JobLog(directory, meta, events)
