"""The training server's guards, against a real server process on loopback: every refusal has
the right status and leaves the server's state directory exactly as it was."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from arthex.adapters.serverless import ModelBusyError, ServerlessAuthError, ServerlessBackend
from arthex.core.config import TrainConfig
from arthex.core.errors import InvalidInputError
from arthex.core.identity import ModelSpec, RunRef
from arthex.testing.builders import synthetic_groups
from tests._serverless import STEP_DELAY_ENV, ServerProcess, directories, snapshot, start_server

pytestmark = pytest.mark.e2e

MAX_BODY = 100_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start_server(
        tmp_path_factory.mktemp("security") / "state",
        backend="tests._serverless:slow_backend",
        extra_args=["--max-body-bytes", str(MAX_BODY)],
        env={STEP_DELAY_ENV: "0.4"},
    )
    try:
        yield process
    finally:
        process.stop()


def http(server: ServerProcess, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def groups_json(n_groups: int = 1) -> list[dict[str, Any]]:
    return [g.model_dump(mode="json") for g in synthetic_groups(n_groups)]


def register(client: httpx.Client, project: str = "proj", name: str = "agent") -> str:
    response = client.post("/preview/models", json={"project": project, "name": name})
    assert response.status_code in (200, 201), response.text
    return str(response.json()["id"])


def wait_done(client: httpx.Client, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/preview/training-jobs/{job_id}").json()
        if job["status"] != "running":
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not end")


class Unchanged:
    """Asserts on exit that the server's state directory is byte-for-byte as on entry, but for
    the files of `running` jobs, which append their events meanwhile."""

    def __init__(self, server: ServerProcess, running: tuple[str, ...] = ()) -> None:
        self.root = server.state_dir
        self.running = tuple(f"jobs/{job}/" for job in running)

    def _files(self) -> dict[str, bytes]:
        return {k: v for k, v in snapshot(self.root).items() if not k.startswith(self.running)}

    def __enter__(self) -> Unchanged:
        self.files = self._files()
        self.dirs = directories(self.root)
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            assert self._files() == self.files
            assert directories(self.root) == self.dirs


ROUTES: list[tuple[str, str, Any]] = [
    ("GET", "/preview/backend", None),
    ("POST", "/preview/models", {"project": "p", "name": "n"}),
    ("GET", "/preview/models", None),
    ("GET", "/preview/models/m000000000000000000000000/checkpoints", None),
    ("DELETE", "/preview/models/m000000000000000000000000/checkpoints", {"steps": [0]}),
    ("POST", "/preview/training-jobs", {"model_id": "m000000000000000000000000"}),
    ("GET", "/preview/training-jobs/j000000000000000000000000/events", None),
    ("GET", "/v1/models", None),
    ("POST", "/v1/chat/completions", {"model": "n", "messages": []}),
    ("GET", "/no/such/route", None),
]


def test_binds_loopback_by_default(server: ServerProcess) -> None:
    assert httpx.URL(server.url).host == "127.0.0.1"


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Token {key}",
        "Bearer wrong-key-0123456789",
        "Basic {key}",
        "Bearer {key}x",
    ],
)
def test_missing_or_wrong_key_is_401_on_every_route(
    server: ServerProcess, authorization: str | None
) -> None:
    key = server.fresh_key()
    headers = {} if authorization is None else {"Authorization": authorization.format(key=key)}
    with Unchanged(server), httpx.Client(base_url=server.url, timeout=30) as client:
        for method, path, body in ROUTES:
            response = client.request(method, path, json=body, headers=headers)
            assert response.status_code == 401, (method, path, response.text)
            assert response.json()["error"]["type"] == "authentication_error"
            assert response.headers["www-authenticate"] == "Bearer"


def test_client_maps_a_refused_key_to_an_auth_error(server: ServerProcess) -> None:
    backend = ServerlessBackend(server.url, "not-a-key-of-this-server", retries=0)
    with Unchanged(server):
        with pytest.raises(ServerlessAuthError, match="refused the API key"):
            _ = backend.capabilities

        async def scenario() -> None:
            try:
                await backend.register(ModelSpec(run=RunRef("p", "n")))
            finally:
                await backend.close()

        with pytest.raises(ServerlessAuthError):
            asyncio.run(scenario())


def test_another_tenants_model_and_job_are_404(server: ServerProcess) -> None:
    alice = http(server, server.fresh_key())
    bob = http(server, server.fresh_key())
    model = register(alice, "shared", "agent")
    created = alice.post(
        "/preview/training-jobs", json={"model_id": model, "trajectory_groups": groups_json()}
    )
    assert created.status_code == 201, created.text
    job = created.json()["id"]
    assert wait_done(alice, job)["status"] == "succeeded"
    with Unchanged(server):
        for method, path, body in [
            ("GET", f"/preview/models/{model}", None),
            ("GET", f"/preview/models/{model}/checkpoints", None),
            ("DELETE", f"/preview/models/{model}/checkpoints", {"steps": [0]}),
            ("POST", "/preview/training-jobs", {"model_id": model, "trajectory_groups": []}),
            ("GET", f"/preview/training-jobs/{job}", None),
            ("GET", f"/preview/training-jobs/{job}/events", None),
            ("POST", "/v1/chat/completions", {"model": "agent@1", "messages": []}),
            ("POST", "/v1/projects/shared/chat/completions", {"model": "agent", "messages": []}),
        ]:
            response = bob.request(method, path, json=body)
            assert response.status_code == 404, (method, path, response.text)
        assert bob.get("/preview/models").json()["data"] == []
    checkpoints = alice.get(f"/preview/models/{model}/checkpoints").json()
    assert checkpoints["step"] == 1
    assert [c["step"] for c in checkpoints["data"]] == [0, 1]
    # The same project/name under bob's key is bob's own model, at step 0.
    bobs = register(bob, "shared", "agent")
    assert bobs != model
    assert bob.get(f"/preview/models/{bobs}/checkpoints").json()["step"] == 0


def test_oversized_bodies_are_413_and_leave_nothing(server: ServerProcess) -> None:
    key = server.fresh_key()
    client = http(server, key)
    model = register(client)
    big = {"model_id": model, "trajectory_groups": groups_json(), "pad": "x" * (2 * MAX_BODY)}
    payload = json.dumps(big).encode()

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap applies while streaming
        for start in range(0, len(payload), 8192):
            yield payload[start : start + 8192]

    with Unchanged(server):
        declared = client.post("/preview/training-jobs", content=payload)
        assert declared.status_code == 413
        assert declared.json()["error"]["type"] == "request_too_large"
        streamed = client.post(
            "/preview/training-jobs",
            content=chunks(),
            headers={"Content-Type": "application/json"},
        )
        assert streamed.status_code == 413

        backend = ServerlessBackend(server.url, key)

        async def scenario() -> None:
            try:
                await backend.register(ModelSpec(run=RunRef("proj", "agent")))
                async for _ in backend.train(
                    RunRef("proj", "agent"), synthetic_groups(60, size=8), TrainConfig()
                ):
                    pass
            finally:
                await backend.close()

        with pytest.raises(InvalidInputError, match="larger than this server accepts"):
            asyncio.run(scenario())
    assert client.get(f"/preview/models/{model}/checkpoints").json()["step"] == 0


def test_second_job_on_a_training_model_is_409(server: ServerProcess) -> None:
    key = server.fresh_key()
    client = http(server, key)
    model = register(client)
    body = {"model_id": model, "trajectory_groups": groups_json(1)}
    backend = ServerlessBackend(server.url, key)

    async def scenario() -> None:
        try:
            await backend.register(ModelSpec(run=RunRef("proj", "agent")))
            with pytest.raises(ModelBusyError, match="one job per model"):
                async for _ in backend.train(
                    RunRef("proj", "agent"), synthetic_groups(), TrainConfig()
                ):
                    pass
        finally:
            await backend.close()

    # The job holds at the closed gate after its first step: it is still running during
    # the checks, however slow the machine.
    with server.gate.closed() as gate:
        first = client.post(
            "/preview/training-jobs", json={**body, "trajectory_groups": groups_json(2)}
        )
        assert first.status_code == 201
        gate.wait_held()
        jobs_before = directories(server.state_dir / "jobs")
        with Unchanged(server, running=(first.json()["id"],)):
            second = client.post("/preview/training-jobs", json=body)
            assert second.status_code == 409
            assert second.json()["error"]["type"] == "model_busy"
            deleting = client.request(
                "DELETE", f"/preview/models/{model}/checkpoints", json={"steps": [0]}
            )
            assert deleting.status_code == 409
        asyncio.run(scenario())
        assert directories(server.state_dir / "jobs") == jobs_before
    assert wait_done(client, first.json()["id"])["status"] == "succeeded"
    third = client.post("/preview/training-jobs", json=body)
    assert third.status_code == 201
    assert wait_done(client, third.json()["id"])["result"]["step"] == 2


@pytest.mark.parametrize(
    ("project", "name"),
    [
        ("..", "agent"),
        ("proj", "../../etc"),
        ("proj", "a/b"),
        ("proj", ".hidden"),
        ("proj", "-rf"),
        ("proj", "x\x00y"),
        ("proj", "with space"),
        ("proj", "n" * 129),
        ("proj", ""),
        (None, "agent"),
        ("proj", 7),
    ],
)
def test_unsafe_names_are_422_and_leave_nothing(
    server: ServerProcess, project: object, name: object
) -> None:
    client = http(server, server.fresh_key())
    with Unchanged(server):
        response = client.post("/preview/models", json={"project": project, "name": name})
        assert response.status_code == 422, response.text
        assert "project" in response.text or "name" in response.text
        assert client.get("/preview/models").json()["data"] == []


def test_traversal_in_url_paths_and_bad_bodies_leave_nothing(server: ServerProcess) -> None:
    client = http(server, server.fresh_key())
    model = register(client)
    with Unchanged(server):
        for path in [
            "/preview/models/..%2F..%2Fregistry.json/checkpoints",
            "/preview/models/%2E%2E/checkpoints",
            "/preview/models/m00000000000000000000000g/checkpoints",
            "/preview/training-jobs/..%2Fregistry.json/events",
            "/preview/training-jobs/%2E%2E/events",
        ]:
            response = client.get(path)
            assert response.status_code == 404, (path, response.text)
        traversal = client.post(
            "/v1/projects/..%2F..%2Fetc/chat/completions", json={"model": "agent", "messages": []}
        )
        assert traversal.status_code == 404
        assert client.post("/preview/models", content=b"{not json").status_code == 400
        for body in [
            {"model_id": model, "trajectory_groups": []},
            {"model_id": model, "trajectory_groups": [{"trajectories": "nope"}]},
            {"model_id": model, "trajectory_groups": groups_json(), "config": {"bogus": 1}},
            {
                "model_id": model,
                "trajectory_groups": groups_json(),
                "config": {"learning_rate": -1},
            },
        ]:
            response = client.post("/preview/training-jobs", json=body)
            assert response.status_code == 422, response.text
        lacking = client.post(
            "/preview/training-jobs",
            json={
                "model_id": model,
                "trajectory_groups": groups_json(),
                "config": {"kl_penalty_coef": 0.1, "kl_penalty_reference_step": 0},
            },
        )
        assert lacking.status_code == 501
        assert lacking.json()["error"]["type"] == "unsupported_capability"
        assert lacking.json()["error"]["param"] == "kl_penalty"
