"""One trainer per model on the training server, with real client processes on loopback: a
second trainer is refused with RunBusyError naming the first (its pid and host) before
anything is written; it gets the model once the first closes, or once a killed first's
lease expires, and continues at the right step. Reads and other tenants are never blocked."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests._serverless import REPO, STEP_DELAY_ENV, ServerProcess, directories, start_server
from tests.e2e.test_serverless_operations import audit_lines
from tests.e2e.test_serverless_security import Unchanged, groups_json, http

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # trainer processes, a TTL to expire

LEASE_TTL_S = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start_server(
        tmp_path_factory.mktemp("lease") / "state",
        backend="tests._serverless:slow_backend",
        extra_args=["--lease-ttl", str(LEASE_TTL_S)],
        env={STEP_DELAY_ENV: "0"},
    )
    try:
        yield process
    finally:
        process.stop()


class Trainer:
    """A tests._lease_client process and its JSON lines."""

    def __init__(self, mode: str, server: ServerProcess, key: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests._lease_client", mode, server.url, key],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def next_event(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise AssertionError(f"trainer {self.pid} ended (status {self.process.wait()})")
        event: dict[str, Any] = json.loads(line)
        return event

    def tell(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def finish(self) -> int:
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        return self.process.wait(timeout=120)


def test_a_second_trainer_is_refused_naming_the_first_until_the_first_closes(
    server: ServerProcess,
) -> None:
    key = server.fresh_key()
    first = Trainer("hold", server, key)
    assert first.next_event() == {"event": "ready", "pid": first.pid, "step": 1}
    with Unchanged(server):
        second = Trainer("try", server, key)
        refused = second.next_event()
        assert second.finish() == 0
    assert refused["event"] == "busy"
    assert f"pid {first.pid} on {socket.gethostname()}" in refused["message"]
    assert "lease/agent" in refused["message"]

    first.tell("close")
    assert first.next_event()["event"] == "closed"
    assert first.finish() == 0
    third = Trainer("try", server, key)
    assert third.next_event() == {"event": "trained", "pid": third.pid, "step": 2, "refusals": 0}
    assert third.finish() == 0


def test_a_killed_trainers_lease_expires_and_the_next_trainer_continues_its_steps(
    server: ServerProcess,
) -> None:
    key = server.fresh_key()
    first = Trainer("hold", server, key)
    assert first.next_event()["step"] == 1
    second = Trainer("wait", server, key)
    refused = second.next_event()
    assert refused["event"] == "busy" and f"pid {first.pid} " in refused["message"]
    first.process.send_signal(signal.SIGKILL)  # no close, no release: the lease must expire
    first.finish()
    second.tell("go")
    trained = second.next_event()
    assert trained["event"] == "trained" and trained["step"] == 2
    assert trained["refusals"] >= 1
    assert second.finish() == 0


def test_training_calls_need_the_lease_while_reads_and_other_tenants_do_not(
    server: ServerProcess,
) -> None:
    key = server.fresh_key()
    holder = Trainer("hold", server, key)
    assert holder.next_event()["event"] == "ready"
    client = http(server, key)  # the same tenant, without the lease
    (model,) = [m["id"] for m in client.get("/preview/models").json()["data"]]
    jobs_before = directories(server.state_dir / "jobs")
    with Unchanged(server):
        job = client.post(
            "/preview/training-jobs", json={"model_id": model, "trajectory_groups": groups_json()}
        )
        assert job.status_code == 409 and job.json()["error"]["type"] == "run_busy"
        deleting = client.request(
            "DELETE", f"/preview/models/{model}/checkpoints", json={"steps": [0]}
        )
        assert deleting.status_code == 409
        steals = client.put(
            f"/preview/models/{model}/lease", json={"id": "x" * 20, "holder": "thief"}
        )
        assert steals.status_code == 409
        assert client.get(f"/preview/models/{model}/checkpoints").json()["step"] == 1
    assert directories(server.state_dir / "jobs") == jobs_before

    other = http(server, server.fresh_key())  # another tenant: its own lease/agent
    mine = other.post("/preview/models", json={"project": "lease", "name": "agent"})
    assert mine.status_code == 201 and mine.json()["id"] != model
    assert str(holder.pid) not in mine.text
    holder.tell("close")
    assert holder.next_event()["event"] == "closed"
    assert holder.finish() == 0


def test_a_backend_used_again_on_a_new_event_loop_keeps_renewing_its_lease(
    server: ServerProcess,
) -> None:
    """The heartbeat that renews the lease ends with the event loop it ran on; registering
    again on the next loop starts it again, so an idle trainer keeps its lease past the TTL.
    Seen in the audit log: a PUT of the lease by this tenant after the trainer went idle."""
    tenant, key = server.fresh_tenant()
    holder = Trainer("relay", server, key)
    try:
        assert holder.next_event() == {"event": "ready", "pid": holder.pid, "step": 2}
        seen = len(audit_lines(server))
        deadline = time.monotonic() + 120  # the beat comes every TTL/3: a deadline, not a pace
        while not any(
            line["method"] == "PUT"
            and line["route"].endswith("/lease")
            and line["tenant"] == tenant
            for line in audit_lines(server)[seen:]
        ):
            assert time.monotonic() < deadline, "no lease renewal after the trainer went idle"
            time.sleep(0.2)
        holder.tell("close")
        assert holder.next_event()["event"] == "closed"
    finally:
        if holder.process.poll() is None and holder.process.stdin is not None:
            holder.process.stdin.close()  # the trainer ends at the end of its input
    assert holder.finish() == 0
