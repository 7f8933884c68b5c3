"""Job events outlive the clients that read them, and the server that wrote them: a client that
stops polling mid-job is replaced by another that resumes from its cursor and reads every event
exactly once; a job running when the server is killed ends, after the restart, with a
`training_failed` event instead of leaving its readers waiting."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from arthex.adapters.serverless import JobEvent, ServerlessBackend, TrainingJobFailed
from arthex.core.config import TrainConfig
from arthex.core.identity import ModelSpec, RunRef
from arthex.testing.builders import synthetic_groups
from tests._serverless import STEP_DELAY_ENV, ServerProcess, start_server

pytestmark = pytest.mark.e2e

RUN = RunRef("durable", "agent")


def slow_server(state_dir: Path, keys: dict[str, str] | None = None) -> ServerProcess:
    return start_server(
        state_dir,
        backend="tests._serverless:slow_backend",
        keys=keys,
        env={STEP_DELAY_ENV: "0.4"},
    )


@pytest.fixture
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerProcess]]:
    holder = [slow_server(tmp_path_factory.mktemp("durable") / "state")]
    try:
        yield holder
    finally:
        holder[0].stop()


async def start_job(url: str, key: str, n_groups: int) -> tuple[str, list[JobEvent]]:
    """Create a job and read its events up to the first gradient step, then walk away."""
    backend = ServerlessBackend(url, key)
    try:
        await backend.register(ModelSpec(run=RUN))
        job = await backend.create_training_job(RUN, synthetic_groups(n_groups), TrainConfig())
        seen = []
        async for event in backend.job_events(job):
            seen.append(event)
            if event.type == "gradient_step":
                break
        return job, seen
    finally:
        await backend.close()


def job_status(server: ServerProcess, key: str, job: str) -> str:
    response = httpx.get(
        f"{server.url}/preview/training-jobs/{job}", headers={"Authorization": f"Bearer {key}"}
    )
    return str(response.json()["status"])


def test_a_new_client_resumes_from_the_cursor_and_sees_each_event_once(
    server: list[ServerProcess],
) -> None:
    current = server[0]
    key = current.fresh_key()
    with current.gate.closed():  # the job holds after its first step until the block ends
        job, seen = asyncio.run(start_job(current.url, key, n_groups=6))
        assert job_status(current, key, job) == "running", "the first client left mid-job"

    async def resume() -> list[JobEvent]:
        backend = ServerlessBackend(current.url, key)  # a new client: no state but the cursor
        try:
            return [event async for event in backend.job_events(job, after=seen[-1].id)]
        finally:
            await backend.close()

    rest = asyncio.run(resume())
    events = seen + rest
    assert [e.id for e in events] == [str(i) for i in range(1, 9)]
    assert [e.type for e in events] == ["training_started"] + ["gradient_step"] * 6 + [
        "training_ended"
    ]
    steps = [e.data for e in events if e.type == "gradient_step"]
    assert all(data and all(isinstance(v, float) for v in data.values()) for data in steps)
    assert events[-1].data["step"] == 1

    # The same events stream as server-sent events, resuming from Last-Event-ID.
    headers = {"Authorization": f"Bearer {key}", "Last-Event-ID": seen[-1].id}
    with httpx.stream(
        "GET",
        f"{current.url}/preview/training-jobs/{job}/events",
        params={"stream": "true"},
        headers=headers,
        timeout=30,
    ) as response:
        streamed = [
            json.loads(line[len("data: ") :])
            for line in response.iter_lines()
            if line.startswith("data: ")
        ]
    assert [e["id"] for e in streamed] == [e.id for e in rest]


def test_a_job_running_when_the_server_dies_ends_failed_after_restart(
    server: list[ServerProcess],
) -> None:
    before = server[0]
    key = before.fresh_key()
    with before.gate.closed():  # the job is held after its first step when the server dies
        job, seen = asyncio.run(start_job(before.url, key, n_groups=6))
        before.stop(kill=True)
    after = slow_server(before.state_dir, keys=before.keys)
    server[0] = after

    async def resume() -> tuple[list[JobEvent], TrainingJobFailed]:
        backend = ServerlessBackend(after.url, key)
        events: list[JobEvent] = []
        try:
            async for event in backend.job_events(job, after=seen[-1].id):
                events.append(event)
        except TrainingJobFailed as failure:
            return events, failure
        finally:
            await backend.close()
        raise AssertionError("the interrupted job did not end with training_failed")

    rest, failure = asyncio.run(resume())
    assert rest[-1].type == "training_failed"
    assert "stopped while this job ran" in str(failure)
    assert failure.job_id == job
    ids = [int(e.id) for e in seen + rest]
    assert ids == list(range(1, len(ids) + 1)), "no event lost or repeated across the restart"
    assert job_status(after, key, job) == "failed"
    listing = httpx.get(
        f"{after.url}/preview/models", headers={"Authorization": f"Bearer {key}"}
    ).json()
    assert [(m["project"], m["name"]) for m in listing["data"]] == [("durable", "agent")]
