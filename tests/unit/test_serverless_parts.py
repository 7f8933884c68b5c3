"""The training server's parts without sockets: the key ring, the job log on disk, the model
registry, the request guard (driven as an ASGI app), the service's clean-up of a failed
register, and the client's mapping of HTTP errors."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from arthex.adapters.serverless import (
    ModelBusyError,
    ServerlessAuthError,
    ServerlessBackend,
    TrainingJobFailed,
)
from arthex.adapters.serverless.client_http import raise_for_status
from arthex.adapters.serverless.wire import decode_metrics, encode_metrics
from arthex.apps.server.guard import TENANT_SCOPE_KEY, Guard
from arthex.apps.server.jobs import JobStore
from arthex.apps.server.keys import KeyRing, hash_key, new_key
from arthex.apps.server.limits import ServerLimits
from arthex.apps.server.registry import ModelRecord, ModelRegistry
from arthex.apps.server.service import TrainingService
from arthex.core.config import TrainConfig
from arthex.core.errors import (
    BackendError,
    CorruptDataError,
    InvalidInputError,
    NotRegisteredError,
    UnsupportedCapability,
)
from arthex.core.identity import ModelSpec, RunRef
from arthex.ports.training_backend import InferenceEndpoint
from arthex.testing.builders import synthetic_groups
from arthex.testing.fakes.backend import InMemoryBackend

KEY_A = "alpha-key-0123456789"
KEY_B = "bravo-key-0123456789"

# --- keys -----------------------------------------------------------------------------------


def test_plain_and_hashed_keys_name_their_tenant() -> None:
    text = f"# comment\nalice:{KEY_A}\n\nbob:{hash_key(KEY_B)}  # hashed\n"
    ring = KeyRing.parse(text, "test")
    assert ring.tenant_for(KEY_A) == "alice"
    assert ring.tenant_for(KEY_B) == "bob"
    assert ring.tenant_for(KEY_A + "x") is None
    assert ring.tenant_for("") is None
    assert ring.tenants == {"alice", "bob"}
    # Only digests are held.
    assert all(len(digest) == 32 for _, digest in ring.entries)
    assert KEY_A.encode() not in repr(ring).encode()


def test_new_key_line_round_trips_without_the_secret() -> None:
    key, line = new_key("carol")
    assert key not in line
    assert line == f"carol:sha256:{hashlib.sha256(key.encode()).hexdigest()}"
    assert KeyRing.parse(line, "test").tenant_for(key) == "carol"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "holds no API keys"),
        ("alice", "expected 'tenant:key'"),
        ("alice:short", "at least 16"),
        ("../x:" + KEY_A, "not a safe path segment"),
        ("alice:sha256:abc", "64 hex digits"),
        (f"alice:{KEY_A}\nbob:{KEY_A}", "listed twice"),
    ],
)
def test_bad_key_files_are_refused(text: str, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        KeyRing.parse(text, "test")


def test_keys_come_from_the_environment_when_no_file_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ARTHEX_SERVER_KEYS", f"alice:{KEY_A},bob:{KEY_B}")
    assert KeyRing.load().tenant_for(KEY_B) == "bob"
    monkeypatch.delenv("ARTHEX_SERVER_KEYS")
    with pytest.raises(InvalidInputError, match="never runs open"):
        KeyRing.load()


# --- jobs -----------------------------------------------------------------------------------


def test_job_events_persist_and_a_reload_ends_running_jobs(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs")
    store.load()
    done = store.create("alice", "m" + "0" * 24)
    done.append("training_started", {"step": 0})
    done.append("training_ended", {"step": 1})
    running = store.create("alice", "m" + "1" * 24)
    running.append("training_started", {"step": 0})
    running.append("gradient_step", {"index": 1, "metrics": {"loss": 1.0}})
    # A crash in the middle of an append leaves half a line.
    with (running.directory / "events.jsonl").open("ab") as file:
        file.write(b'{"id": "3", "type": "gradi')

    reloaded = JobStore(tmp_path / "jobs")
    ended = reloaded.load()
    assert [job.id for job in ended] == [running.id]
    again = reloaded.get("alice", running.id)
    assert again is not None
    assert [e["type"] for e in again.events] == [
        "training_started",
        "gradient_step",
        "training_failed",
    ]
    assert [e["id"] for e in again.events] == ["1", "2", "3"]
    lines = (again.directory / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["1", "2", "3"]
    assert reloaded.get("bob", running.id) is None, "another tenant finds no job"
    first = reloaded.get("alice", done.id)
    assert first is not None and first.status == "succeeded"
    assert first.after(1, 10) == ([first.events[1]], False)
    assert first.after(0, 1) == ([first.events[0]], True)


def test_read_jobs_are_pruned_after_retention_and_unread_ones_kept(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs", retention_s=0.0)
    store.load()
    read = store.create("alice", "m" + "0" * 24)
    read.append("training_ended", {"step": 1})
    unread = store.create("alice", "m" + "1" * 24)
    unread.append("training_ended", {"step": 1})
    read.mark_read()
    store.prune()
    assert not read.directory.exists()
    assert unread.directory.exists()


def test_waiting_returns_when_an_event_arrives(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs")
    store.load()
    job = store.create("alice", "m" + "0" * 24)

    async def scenario() -> int:
        async def later() -> None:
            await asyncio.sleep(0.05)
            job.append("training_started", {"step": 0})

        task = asyncio.create_task(later())
        await job.wait(0, 10.0)
        await task
        return len(job.events)

    assert asyncio.run(scenario()) == 1


# --- registry -------------------------------------------------------------------------------


def test_registry_persists_and_hides_other_tenants(tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path / "registry.json")
    record = ModelRecord(
        id=registry.new_id("alice", "p", "n"), tenant="alice", project="p", name="n", base_model="b"
    )
    registry.add(record)
    reloaded = ModelRegistry(tmp_path / "registry.json")
    reloaded.load()
    assert reloaded.find("alice", "p", "n") == record
    assert reloaded.find("bob", "p", "n") is None
    assert reloaded.get("bob", record.id) is None
    assert record.run.project == "alice" and record.run.name == record.id


def test_a_damaged_registry_is_reported_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "registry.json"
    path.write_text("{not json")
    with pytest.raises(CorruptDataError, match="registry"):
        ModelRegistry(path).load()
    assert path.read_text() == "{not json"


# --- service --------------------------------------------------------------------------------


class FailingRegister(InMemoryBackend):
    """Makes the model's folder, then fails: what a backend does with a bad base model."""

    async def register(self, model: ModelSpec) -> InferenceEndpoint | None:
        (Path(model.base_path) / model.run.project / "models" / model.run.name).mkdir(parents=True)
        raise InvalidInputError(f"cannot load base model {model.base_model!r}")


def test_a_failed_register_leaves_nothing_behind(tmp_path: Path) -> None:
    service = TrainingService(FailingRegister(), tmp_path / "state")
    service.open()
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))

    async def scenario() -> None:
        await service.register("alice", "p", "n", "/nowhere", None)

    with pytest.raises(InvalidInputError, match="cannot be loaded by this server"):
        asyncio.run(scenario())
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert service.registry.of_tenant("alice") == []


def test_base_models_can_be_restricted(tmp_path: Path) -> None:
    service = TrainingService(InMemoryBackend(), tmp_path, allowed_base_models={"ok-model"})
    service.open()
    with pytest.raises(InvalidInputError, match="not offered"):
        asyncio.run(service.register("alice", "p", "n", "/etc", None))
    record, created, _ = asyncio.run(service.register("alice", "p", "n", "ok-model", None))
    assert created and record.base_model == "ok-model"


# --- guard ----------------------------------------------------------------------------------

Scope = MutableMapping[str, Any]


def drive(guard: Guard, headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> tuple[int, Any]:
    """Send one request through the guard; returns (status, what the inner app saw)."""
    seen: dict[str, Any] = {}

    async def inner(scope: Scope, receive: Any, send: Any) -> None:
        message = await receive()
        seen["tenant"] = scope[TENANT_SCOPE_KEY]
        seen["body"] = message["body"]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    guard.app = inner
    pending = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    sent: list[MutableMapping[str, Any]] = []
    received = 0

    async def receive() -> MutableMapping[str, Any]:
        nonlocal received
        received += 1
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "path": "/x", "headers": headers}
    asyncio.run(guard(scope, receive, send))
    seen["chunks_read"] = received
    return int(sent[0]["status"]), seen


def test_the_guard_authenticates_then_caps_the_body_while_reading() -> None:
    async def unused(scope: Scope, receive: Any, send: Any) -> None:
        raise AssertionError("replaced by drive()")

    guard = Guard(
        unused,
        keys=KeyRing.parse(f"alice:{KEY_A}", "t"),
        limits=ServerLimits(max_body_bytes=1024, spool_threshold_bytes=100),
    )
    auth = [(b"authorization", f"Bearer {KEY_A}".encode())]
    assert drive(guard, [], [b"{}"])[0] == 401
    assert drive(guard, [(b"authorization", b"Bearer nope")], [b"{}"])[0] == 401
    status, seen = drive(guard, auth, [b"12345", b"678"])
    assert status == 200 and seen["tenant"] == "alice" and seen["body"] == b"12345678"
    assert drive(guard, [*auth, (b"content-length", b"1025")], [b"x" * 1025])[0] == 413
    status, seen = drive(guard, auth, [b"x" * 150, b"y" * 150])  # spooled past 100 bytes
    assert status == 200 and seen["body"] == b"x" * 150 + b"y" * 150
    status, seen = drive(guard, auth, [b"1" * 600, b"2" * 600, b"3", b"4", b"5"])
    assert status == 413
    assert seen["chunks_read"] == 2, "refused as soon as the cap was passed"


# --- client error mapping -------------------------------------------------------------------


def response(status: int, kind: str = "x", message: str = "the server said so") -> httpx.Response:
    body = {"error": {"message": message, "type": kind, "param": "loss:ppo", "code": status}}
    return httpx.Response(status, json=body)


@pytest.mark.parametrize(
    ("status", "kind", "error"),
    [
        (401, "authentication_error", ServerlessAuthError),
        (404, "not_found", NotRegisteredError),
        (409, "model_busy", ModelBusyError),
        (413, "request_too_large", InvalidInputError),
        (422, "invalid_request", InvalidInputError),
        (400, "invalid_request", InvalidInputError),
        (501, "unsupported_capability", UnsupportedCapability),
        (500, "internal_error", BackendError),
    ],
)
def test_statuses_map_to_clear_errors(status: int, kind: str, error: type[Exception]) -> None:
    with pytest.raises(error, match="the server said so"):
        raise_for_status("GET", "/p", response(status, kind))


def test_non_finite_metrics_travel_as_null() -> None:
    encoded = encode_metrics({"a": 1, "b": float("nan"), "c": float("inf")})
    assert json.loads(json.dumps(encoded)) == {"a": 1.0, "b": None, "c": None}
    decoded = decode_metrics(encoded)
    assert decoded["a"] == 1.0 and decoded["b"] != decoded["b"]


# --- client retries and cursor (an in-process httpx transport plays the server) -------------

Handler = Any


def backend_with(handler: Handler, *, retries: int = 3) -> tuple[ServerlessBackend, list[str]]:
    """A client whose requests `handler(request, n)` answers; returns it and a request log."""
    log: list[str] = []

    def respond(request: httpx.Request) -> httpx.Response:
        log.append(f"{request.method} {request.url.path}?{request.url.query.decode()}")
        result: httpx.Response = handler(request, len(log))
        return result

    backend = ServerlessBackend(
        "http://server.test",
        "k" * 20,
        retries=retries,
        backoff_s=0.0,
        transport=httpx.MockTransport(respond),
    )
    return backend, log


def registered(request: httpx.Request) -> httpx.Response | None:
    if request.method == "POST" and request.url.path == "/v1/preview/models":
        return httpx.Response(
            201,
            json={"id": "m" + "0" * 24, "entity": "t", "capabilities": ["train", "loss:cispo"]},
        )
    return None


def use(backend: ServerlessBackend, action: Any) -> Any:
    async def main() -> Any:
        try:
            await backend.register(ModelSpec(run=RUN))
            return await action()
        finally:
            await backend.close()

    return asyncio.run(main())


RUN = RunRef("p", "n")


def test_gets_are_retried_on_5xx_429_and_connection_errors() -> None:
    def handler(request: httpx.Request, n: int) -> httpx.Response:
        if (reply := registered(request)) is not None:
            return reply
        if n == 2:
            raise httpx.ConnectError("refused", request=request)
        if n in (3, 4):
            return httpx.Response(503 if n == 3 else 429, json={})
        assert request.url.params["order"] == "desc" and request.url.params["limit"] == "1"
        return httpx.Response(200, json={"data": [{"id": "c1", "step": 1}], "has_more": True})

    backend, log = backend_with(handler)
    assert use(backend, lambda: backend.get_step(RUN)) == 1
    assert len(log) == 5  # register, then four tries of one GET


def test_gets_give_up_after_the_retries_with_a_clear_error() -> None:
    def handler(request: httpx.Request, n: int) -> httpx.Response:
        return registered(request) or httpx.Response(502, json={"error": {"message": "down"}})

    backend, log = backend_with(handler, retries=2)
    with pytest.raises(BackendError, match="HTTP 502: down"):
        use(backend, lambda: backend.get_step(RUN))
    assert len(log) == 1 + 3


@pytest.mark.parametrize("failure", ["status", "connection"])
def test_posts_are_never_retried(failure: str) -> None:
    def handler(request: httpx.Request, n: int) -> httpx.Response:
        if (reply := registered(request)) is not None:
            return reply
        if failure == "connection":
            raise httpx.ReadError("reset", request=request)
        return httpx.Response(503, json={"error": {"message": "overloaded"}})

    backend, log = backend_with(handler)

    async def train() -> None:
        async for _ in backend.train_steps(RUN, synthetic_groups(), TrainConfig()):
            pass

    with pytest.raises(BackendError, match="overloaded" if failure == "status" else "not retried"):
        use(backend, train)
    assert [line.split("?")[0] for line in log] == [
        "POST /v1/preview/models",
        "POST /v1/preview/training-jobs",
    ]


def test_the_event_cursor_advances_past_every_event(monkeypatch: pytest.MonkeyPatch) -> None:
    from arthex.adapters.serverless import client

    monkeypatch.setattr(client, "EMPTY_POLL_PAUSE_S", 0.0)
    pages: list[list[tuple[str, str, dict[str, Any]]]] = [
        [("1", "training_started", {}), ("2", "gradient_step", {"loss": 0.5})],
        [],
        [("3", "gradient_step", {"loss": "NaN"}), ("4", "training_ended", {"step": 1})],
    ]

    def handler(request: httpx.Request, n: int) -> httpx.Response:
        if (reply := registered(request)) is not None:
            return reply
        if request.method == "POST":
            return httpx.Response(201, json={"id": "j" + "0" * 24})
        page = pages.pop(0)
        data = [{"id": i, "type": t, "data": d} for i, t, d in page]
        return httpx.Response(200, json={"data": data, "has_more": False})

    backend, log = backend_with(handler)

    async def train() -> list[dict[str, float]]:
        return [dict(m) async for m in backend.train_steps(RUN, synthetic_groups(), TrainConfig())]

    metrics = use(backend, train)
    assert metrics[0] == {"loss": 0.5} and metrics[1]["loss"] != metrics[1]["loss"]  # NaN
    afters = [line.split("after=")[1].split("&")[0] for line in log if "events" in line]
    assert afters == ["0", "2", "2"]


def test_a_failed_job_raises_with_the_servers_message() -> None:
    def handler(request: httpx.Request, n: int) -> httpx.Response:
        if (reply := registered(request)) is not None:
            return reply
        if request.method == "POST":
            return httpx.Response(201, json={"id": "j" + "0" * 24})
        data = [{"id": "1", "type": "training_failed", "data": {"error_message": "out of memory"}}]
        return httpx.Response(200, json={"data": data, "has_more": False})

    backend, _ = backend_with(handler)

    async def train() -> None:
        async for _ in backend.train_steps(RUN, synthetic_groups(), TrainConfig()):
            pass

    with pytest.raises(TrainingJobFailed, match="failed: out of memory"):
        use(backend, train)
