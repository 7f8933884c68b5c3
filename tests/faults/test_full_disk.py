"""A full disk (ENOSPC from the kernel, on a small tmpfs) at each write a run makes.

For each write: the call fails with one arthex line (DiskFullError, still an OSError) naming
the path, the bytes it needed and what to free; nothing half-written is left where a reader
would take it for whole; once the ballast is gone the same call succeeds and reads back whole.
Before the fix every one of these raised the writer's own error (a raw `[Errno 28]`, pyarrow's
or safetensors' `SafetensorError`), and the checkpoint save was never refused early.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest

from arthex.adapters.files import atomic_write_bytes, new_folder
from arthex.adapters.inference.asgi import Scope
from arthex.adapters.jsonl_history import JsonlHistory
from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.adapters.run_files.lease import FileRunLeases
from arthex.adapters.run_files.pipeline import JsonPipelineStateStore
from arthex.apps.server.guard import Guard
from arthex.apps.server.jobs import JobStore
from arthex.apps.server.limits import ServerLimits
from arthex.apps.server.registry import load_or_create_secret
from arthex.core.errors import DiskFullError
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow
from arthex.core.pipeline_record import PipelineRecord
from arthex.testing.builders import make_group
from tests.faults._tiny_disk import files_under, fill, free_up, tiny_disk

pytestmark = pytest.mark.faults

RUN = RunRef("p", "m")


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with tiny_disk(tmp_path / "disk", 8) as mounted:
        yield mounted


def one_line(error: pytest.ExceptionInfo[DiskFullError], path: Path) -> str:
    text = str(error.value)
    assert "\n" not in text
    assert str(path) in text and "bytes" in text and "free at least" in text
    assert "arthex prune" in text  # what to free
    return text


def test_a_history_row(disk: Path) -> None:
    history = JsonlHistory(str(disk))
    asyncio.run(history.report(RUN, MetricsRow(step=0, values={"val/reward": 1.0})))
    before = files_under(disk)
    fill(disk)
    row = MetricsRow(step=1, values={f"val/metric_{k}": float(k) for k in range(400)})
    with pytest.raises(DiskFullError) as caught:
        asyncio.run(history.report(RUN, row))
    one_line(caught, history.path(RUN))
    assert files_under(disk) == before  # no torn line, no .torn file
    free_up(disk)
    asyncio.run(history.report(RUN, row))
    assert [r.step for r in asyncio.run(history.rows(RUN))] == [0, 1]


def test_a_trajectory_part(disk: Path) -> None:
    store = ParquetTrajectoryStore(str(disk))
    first = [make_group((0.0, 1.0), metadata={"n": "first"})]
    asyncio.run(store.write(RUN, "train", 0, first))
    before = files_under(disk)
    fill(disk)
    more = [make_group((0.5, 1.0), metadata={"n": str(k)}) for k in range(50)]
    with pytest.raises(DiskFullError) as caught:
        asyncio.run(store.write(RUN, "train", 0, more))
    one_line(caught, Path(store.split_dir(RUN, "train")) / "0000.parquet")
    assert files_under(disk) == before  # the step file as it was, no temp part beside it
    free_up(disk)
    asyncio.run(store.write(RUN, "train", 0, more))
    assert [g.metadata["n"] for g in asyncio.run(store.read(RUN, "train", 0))] == [
        "first",
        *(str(k) for k in range(50)),
    ]


def test_the_pipeline_record_and_every_atomically_replaced_file(disk: Path) -> None:
    store = JsonPipelineStateStore(str(disk))
    asyncio.run(store.save(RUN, PipelineRecord(step=1, offset=8)))
    before = files_under(disk)
    fill(disk)
    bigger = PipelineRecord(step=2, offset=4000, pending=tuple(range(0, 4000, 3)))
    with pytest.raises(DiskFullError) as caught:
        asyncio.run(store.save(RUN, bigger))
    one_line(caught, store.path(RUN))
    assert files_under(disk) == before
    assert asyncio.run(store.load(RUN)) == PipelineRecord(step=1, offset=8)
    # the same helper writes the run state, the server's registry and lease table, wandb's
    # run record, diagnostics reports: each is whole or as it was
    data = json.dumps({"models": [1] * 9000}).encode()
    with pytest.raises(DiskFullError) as caught:
        atomic_write_bytes(disk / "registry.json", data)
    assert f"the write needs {len(data) / 1024:.1f} KiB ({len(data)} bytes)" in one_line(
        caught, disk / "registry.json"
    )
    assert not (disk / "registry.json").exists()
    free_up(disk)
    asyncio.run(store.save(RUN, bigger))
    assert asyncio.run(store.load(RUN)) == bigger


def test_the_lease_file(disk: Path) -> None:
    leases = FileRunLeases(str(disk))
    (disk / "p" / "models" / "m").mkdir(parents=True)
    fill(disk)
    with pytest.raises(DiskFullError) as caught:
        leases.acquire_now(RUN)
    one_line(caught, leases.path(RUN))
    free_up(disk)
    lease = leases.acquire_now(RUN)  # the failed attempt let the lock go
    try:
        assert json.loads(leases.path(RUN).read_text())["pid"] > 0
    finally:
        lease.release_now()


def test_an_export_folder(disk: Path) -> None:
    target = disk / "exported"
    fill(disk, leave=64 * 1024)
    with pytest.raises(DiskFullError) as caught, new_folder(target) as temp:
        (temp / "model.safetensors").write_bytes(b"\1" * (1 << 20))
    one_line(caught, target)
    assert not target.exists() and [p.name for p in disk.iterdir()] == ["ballast"]


# --- the training server --------------------------------------------------------------------


def test_the_servers_request_spool_answers_507(disk: Path) -> None:
    spooled: list[bytes] = []

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        spooled.append(b"reached")

    guard = Guard(
        app,
        keys=None,
        limits=ServerLimits(max_body_bytes=64 << 20, spool_threshold_bytes=1024),
        spool_dir=lambda: str(disk),
    )
    chunks = [b"x" * (1 << 20)] * 4
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        chunk = chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    fill(disk, leave=1 << 20)
    headers = [(b"content-length", str(4 << 20).encode())]
    asyncio.run(guard({"type": "http", "path": "/x", "headers": headers}, receive, send))
    assert sent[0]["status"] == 507 and not spooled
    body = json.loads(sent[1]["body"])
    assert str(disk) not in json.dumps(body)  # the server's paths are not the tenant's
    assert f"{4 << 20}-byte request" in body["error"]["message"]
    assert [p.name for p in disk.iterdir()] == ["ballast"]  # the spool file went with it


def test_a_jobs_event_log_and_the_servers_secret(disk: Path) -> None:
    jobs = JobStore(disk / "jobs")
    jobs.load()
    job = jobs.create("t", "m1")
    job.append("training_job.progress", {"step": 1})
    before = files_under(disk)
    fill(disk)
    with pytest.raises(DiskFullError) as caught:
        job.append("training_job.progress", {"step": 2, "pad": "x" * 5000})
    one_line(caught, job.directory / "events.jsonl")
    assert files_under(disk) == before and len(job.events) == 1
    with pytest.raises(DiskFullError) as caught:
        load_or_create_secret(disk / "secret")
    one_line(caught, disk / "secret")
    assert not any(p.name.startswith(".tmp-") for p in disk.iterdir())
    free_up(disk)
    job.append("training_job.progress", {"step": 2})
    reread = JobStore(disk / "jobs")
    reread.load()
    found = reread.get("t", job.id)
    assert found is not None and [e["data"].get("step") for e in found.events][:2] == [1, 2]
    assert len(load_or_create_secret(disk / "secret")) >= 16
