"""What an operator of a shared training server relies on, against real server processes on
loopback: /healthz without a key, /metrics with an admin key, per-tenant quotas (models, jobs,
checkpoint bytes) that refuse with nothing half-written, a per-key rate limit with
Retry-After, the job queue, and an audit log that says who did what and never holds a key or
a body."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from arthex.adapters.serverless import QuotaExceededError, ServerlessBackend
from arthex.core.config import TrainConfig
from arthex.core.errors import BackendError
from arthex.core.identity import ModelSpec, RunRef
from arthex.testing.builders import synthetic_groups
from tests._serverless import (
    REPO,
    STEP_DELAY_ENV,
    ServerProcess,
    directories,
    make_keys,
    start_server,
)
from tests.e2e.test_serverless_security import Unchanged, groups_json, http, register, wait_done

pytestmark = pytest.mark.e2e

ADMIN_KEY = "admin-" + secrets.token_urlsafe(18)


def admin_keys_file(directory: Path) -> Path:
    path = directory / f"admin-{secrets.token_hex(4)}.txt"
    path.write_text(f"ops:{ADMIN_KEY}\n")
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("operations")
    process = start_server(
        root / "state",
        backend="tests._serverless:slow_backend",
        extra_args=[
            "--admin-keys",
            str(admin_keys_file(root)),
            "--rate-limit",
            "0",
            "--max-models-per-tenant",
            "2",
            "--max-jobs-per-tenant",
            "1",
            "--max-running-jobs",
            "1",
        ],
        env={STEP_DELAY_ENV: "0.3"},
    )
    try:
        yield process
    finally:
        process.stop()


def metrics(server: ServerProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of GET /metrics, by (name, sorted labels)."""
    response = httpx.get(
        server.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=30
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def requests_counted(server: ServerProcess, method: str, route: str, status: int) -> float:
    labels = (("method", method), ("route", route), ("status", str(status)))
    return metrics(server).get(("arthex_requests_total", labels), 0.0)


def audit_lines(server: ServerProcess) -> list[dict[str, Any]]:
    files = sorted(server.state_dir.glob("audit.jsonl*"), reverse=True)
    return [json.loads(line) for path in files for line in path.read_text().splitlines()]


# --- health and metrics ---------------------------------------------------------------------


def test_healthz_answers_without_a_key_and_says_only_that_it_lives(server: ServerProcess) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong-key-0123456789"}):
        response = httpx.get(server.url + "/healthz", headers=headers)
        assert response.status_code == 200
        assert response.json() == {"status": "ok"}
    assert httpx.post(server.url + "/healthz").status_code == 405
    assert all(line["route"] != "/healthz" for line in audit_lines(server))


def test_metrics_need_an_admin_key_and_count_requests_by_route_and_status(
    server: ServerProcess,
) -> None:
    tenant_key = server.fresh_key()
    for key in (None, tenant_key, "wrong-admin-key-0123456789"):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        assert httpx.get(server.url + "/metrics", headers=headers).status_code == 401
    # And an admin key is no tenant key.
    admin = httpx.get(
        server.url + "/preview/models", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    )
    assert admin.status_code == 401

    before = requests_counted(server, "GET", "/preview/models", 200)
    unauthorized = requests_counted(server, "GET", "/preview/models/{model_id}", 401)
    client = http(server, tenant_key)
    for _ in range(3):
        assert client.get("/preview/models").status_code == 200
    httpx.get(server.url + "/preview/models/m" + "0" * 24)
    assert requests_counted(server, "GET", "/preview/models", 200) == before + 3
    assert requests_counted(server, "GET", "/preview/models/{model_id}", 401) == unauthorized + 1
    httpx.get(server.url + "/no/such/" + secrets.token_hex(8))  # never its own label
    assert not any("no/such" in str(labels) for _, labels in metrics(server))


@pytest.mark.slow
def test_jobs_beyond_the_running_limit_wait_in_a_queue_the_metrics_show(
    server: ServerProcess,
) -> None:
    alice, bob = http(server, server.fresh_key()), http(server, server.fresh_key())
    with server.gate.closed() as gate:  # the first job holds after its first step
        first = alice.post(
            "/preview/training-jobs",
            json={"model_id": register(alice), "trajectory_groups": groups_json(2)},
        ).json()["id"]
        gate.wait_held()
        second = bob.post(
            "/preview/training-jobs",
            json={"model_id": register(bob), "trajectory_groups": groups_json(1)},
        ).json()["id"]
        sample = metrics(server)
        assert sample[("arthex_jobs_running", ())] == 1
        assert sample[("arthex_jobs_queued", ())] == 1
    assert wait_done(alice, first)["status"] == "succeeded"
    assert wait_done(bob, second)["status"] == "succeeded"
    ended = alice.get(f"/preview/training-jobs/{first}/events", params={"limit": 1000}).json()
    started = bob.get(f"/preview/training-jobs/{second}/events").json()
    assert started["data"][0]["created_at"] >= ended["data"][-1]["created_at"], "it waited"
    sample = metrics(server)
    assert sample[("arthex_jobs_running", ())] == 0
    assert sample[("arthex_jobs_queued", ())] == 0


# --- quotas ---------------------------------------------------------------------------------


def test_model_and_job_quotas_refuse_with_429_and_write_nothing(server: ServerProcess) -> None:
    key = server.fresh_key()
    client = http(server, key)
    first, second = register(client, "p", "one"), register(client, "p", "two")
    with Unchanged(server):
        third = client.post("/preview/models", json={"project": "p", "name": "three"})
        assert third.status_code == 429, third.text
        assert third.json()["error"]["type"] == "insufficient_quota"
        assert "2" in third.json()["error"]["message"]
        assert "retry-after" not in third.headers, "waiting does not free a model"
    assert register(client, "p", "one") == first, "an existing model is still found"

    backend = ServerlessBackend(server.url, key)

    async def third_by_client() -> None:
        try:
            await backend.register(ModelSpec(run=RunRef("p", "three")))
        finally:
            await backend.close()

    with pytest.raises(QuotaExceededError, match="models"):
        asyncio.run(third_by_client())

    with server.gate.closed() as gate:  # the job holds after its first step: still running
        running = client.post(
            "/preview/training-jobs", json={"model_id": first, "trajectory_groups": groups_json(2)}
        )
        assert running.status_code == 201
        gate.wait_held()
        # The running job appends its events meanwhile: compare the job folders, not their files.
        jobs_before = directories(server.state_dir / "jobs")
        refused = client.post(
            "/preview/training-jobs", json={"model_id": second, "trajectory_groups": groups_json()}
        )
        assert refused.status_code == 429, refused.text
        assert "wait for one to end" in refused.json()["error"]["message"]
        assert directories(server.state_dir / "jobs") == jobs_before
    wait_done(client, running.json()["id"])
    again = client.post(
        "/preview/training-jobs", json={"model_id": second, "trajectory_groups": groups_json()}
    )
    assert again.status_code == 201
    wait_done(client, again.json()["id"])


# --- audit log ------------------------------------------------------------------------------


def test_the_audit_log_says_who_did_what_and_never_holds_a_key_or_a_body(
    server: ServerProcess,
) -> None:
    tenant, key = server.fresh_tenant()
    client = http(server, key)
    marker = "body-marker-" + secrets.token_hex(8)
    model = client.post(
        "/preview/models", json={"project": "audited", "name": "agent", "config": {"m": marker}}
    ).json()["id"]
    job = client.post(
        "/preview/training-jobs",
        json={"model_id": model, "trajectory_groups": groups_json(), "note": marker},
    ).json()["id"]
    wait_done(client, job)
    wrong_key = "wrong-" + secrets.token_hex(12)
    httpx.get(
        server.url + f"/preview/models/{model}", headers={"Authorization": f"Bearer {wrong_key}"}
    )
    lines = audit_lines(server)
    text = "".join(path.read_text() for path in server.state_dir.glob("audit.jsonl*"))
    for secret in (key, wrong_key, ADMIN_KEY, marker):
        assert secret not in text
    mine = [line for line in lines if line["tenant"] == tenant]
    assert {
        "route": "/preview/models",
        "method": "POST",
        "status": 201,
        "model_id": model,
    }.items() <= mine[0].items()
    created = [line for line in mine if line["route"] == "/preview/training-jobs"]
    assert created[0]["status"] == 201 and created[0]["job_id"] == job
    assert created[0]["model_id"] == model
    polls = [line for line in mine if line["route"] == "/preview/training-jobs/{job_id}"]
    assert polls and all(line["job_id"] == job for line in polls)
    refused = [line for line in lines if line["route"] == "/preview/models/{model_id}"]
    assert refused[-1]["status"] == 401 and refused[-1]["tenant"] is None
    assert refused[-1]["model_id"] is None, (
        "a refused caller learns nothing, and neither does the log"
    )
    assert all(line["time"] and line["duration_ms"] >= 0 for line in lines)


# --- rate limit -----------------------------------------------------------------------------


def test_a_key_past_its_rate_gets_429_with_retry_after_and_others_do_not(tmp_path: Path) -> None:
    rated = start_server(
        tmp_path / "state",
        extra_args=[
            "--rate-limit",
            "0.001",
            "--rate-burst",
            "3",
            "--admin-keys",
            str(admin_keys_file(tmp_path)),
        ],
    )
    try:
        alice_key, bob_key = rated.fresh_key(), rated.fresh_key()
        alice = http(rated, alice_key)
        assert [alice.get("/preview/models").status_code for _ in range(3)] == [200] * 3
        refused = alice.get("/preview/models")
        assert refused.status_code == 429
        assert refused.json()["error"]["type"] == "rate_limit_exceeded"
        assert int(refused.headers["retry-after"]) >= 1
        assert http(rated, bob_key).get("/preview/models").status_code == 200
        assert httpx.get(rated.url + "/healthz").status_code == 200, "health is never limited"
        assert metrics(rated)[("arthex_rate_limited_total", ())] == 1

        backend = ServerlessBackend(rated.url, alice_key, retries=0)

        async def scenario() -> None:
            try:
                await backend.register(ModelSpec(run=RunRef("p", "n")))
            finally:
                await backend.close()

        with pytest.raises(BackendError, match=r"HTTP 429.*requests a second"):
            asyncio.run(scenario())
    finally:
        rated.stop()


def test_an_admin_key_that_is_also_a_tenant_key_stops_the_start(tmp_path: Path) -> None:
    keys = make_keys(1)
    (tmp_path / "keys.txt").write_text("".join(f"{t}:{k}\n" for t, k in keys.items()))
    (tmp_path / "admin.txt").write_text(f"ops:{next(iter(keys.values()))}\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "arthex.apps.server",
            "--backend",
            "inmemory",
            "--keys",
            str(tmp_path / "keys.txt"),
            "--admin-keys",
            str(tmp_path / "admin.txt"),
            "--state-dir",
            str(tmp_path / "state"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "admin key and a tenant key" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


# --- checkpoint storage (the LocalBackend writes real checkpoints) ---------------------------


def tenant_bytes(state: Path, tenant: str) -> int:
    return sum(
        os.lstat(Path(root) / name).st_size
        for root, _, names in os.walk(state / "backend" / tenant)
        for name in names
    )


@pytest.mark.slow
def test_a_checkpoint_quota_refuses_what_would_pass_it_with_507_until_some_are_deleted(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch")
    from arthex.testing.tiny_model import tiny_model

    tiny = tiny_model(tmp_path / "tiny")
    keys = make_keys(2)
    (tenant, key), (_, other_key) = list(keys.items())
    run = RunRef("stored", "agent")

    async def train(url: str, steps: int) -> list[int]:
        backend = ServerlessBackend(url, key)
        try:
            await backend.register(ModelSpec(run=run, base_model=tiny))
            for _ in range(steps):
                async for _ in backend.train(run, synthetic_groups(), TrainConfig()):
                    pass
            return await backend.checkpoint_steps(run)
        finally:
            await backend.close()

    first = start_server(tmp_path / "state", backend="local", keys=keys)
    try:
        assert asyncio.run(train(first.url, 2)) == [0, 1, 2]
    finally:
        first.stop()
    used = tenant_bytes(tmp_path / "state", tenant)
    quota = used + used // 3 // 2  # room for half an average checkpoint more
    admin = admin_keys_file(tmp_path)
    limited = start_server(
        tmp_path / "state",
        backend="local",
        keys=keys,
        extra_args=["--max-checkpoint-bytes-per-tenant", str(quota), "--admin-keys", str(admin)],
    )
    try:
        stored = metrics(limited)[("arthex_checkpoint_bytes", (("tenant", tenant),))]
        assert stored == used
        with Unchanged(limited), pytest.raises(QuotaExceededError, match="quota") as refused:
            asyncio.run(train(limited.url, 1))
        assert refused.value.status == 507
        other_client = http(limited, other_key)
        fits = other_client.post(
            "/preview/models", json={"project": "p", "name": "mine", "base_model": tiny}
        )
        assert fits.status_code == 201, "another tenant's quota is its own"

        async def free_one() -> list[int]:
            backend = ServerlessBackend(limited.url, key)
            try:
                await backend.register(ModelSpec(run=run, base_model=tiny))
                await backend.delete_checkpoint_files(run, [2])
                return await backend.checkpoint_steps(run)
            finally:
                await backend.close()

        assert asyncio.run(free_one()) == [2]
        assert asyncio.run(train(limited.url, 1)) == [2, 3]
    finally:
        limited.stop()
