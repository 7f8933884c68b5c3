"""`arthex serve --protocol art` as a real process on loopback with the tiny model on
LocalBackend(engine="torch"), driven with the requests ART 0.5.17's client sent through NAT
1.9.0's RemoteBackend (recorded; no NAT venv needed): NAT-shaped Choices (logprob tokens
`token_id:N`, no token ids) train, the learning rate NAT configures is the one used, the step
is visible when the stream ends, checkpoints are deleted as ART asked, `{name}@{step}` is
served, errors are ART's shape, and a client that goes away mid-update stops nothing."""

from __future__ import annotations

import asyncio
import json
import math
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from arthex.testing.tiny_model import tiny_model
from tests._art_server import (
    PAUSE_DIR_ENV,
    REPO,
    TINKER_KEY,
    TINKER_URL_ENV,
    ArtServer,
    recorded_requests,
    start_art_server,
)

pytestmark = pytest.mark.e2e

NAT_LEARNING_RATE = 1e-4
RUN_DIR = ("nat-project", "models", "agent")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny: str) -> Iterator[ArtServer]:
    process = start_art_server(tmp_path_factory.mktemp("art-server") / "runs")
    try:
        yield process
    finally:
        process.stop()


def checkpoints(server: ArtServer, name: str = "agent") -> list[int]:
    folder = server.base_path.joinpath("nat-project", "models", name, "checkpoints")
    return sorted(int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit())


def train_lines(client: httpx.Client, body: dict[str, Any]) -> list[dict[str, Any]]:
    with client.stream("POST", "/_train_model", json=body) as response:
        assert response.status_code == 200, response.read()
        return [json.loads(line) for line in response.iter_lines() if line]


def test_the_recorded_nat_session_trains_two_steps(server: ArtServer, tiny: str) -> None:
    """Every recorded API request replayed in order, each answer checked as ART's client
    reads it."""
    requests = [r for r in recorded_requests(tiny) if r["port"] == "api"]
    client = httpx.Client(base_url=server.api_url, timeout=300)
    steps_seen = []
    for request in requests:
        path, body = request["path"], request["body"]
        if path == "/_train_model":
            before = checkpoints(server)
            lines = train_lines(client, body)
            assert lines, "one line per gradient step"
            for line in lines:
                assert all(isinstance(v, int | float) for v in line.values()), line
                # the learning rate NAT configured (trainer_args), not config's 5e-05
                assert math.isclose(line["loss/learning_rate"], NAT_LEARNING_RATE)
            # visible the moment the stream ends
            step = client.post("/_get_step", json=body["model"]).json()
            assert step == max(before) + 1
            assert checkpoints(server)[-1] == step
            continue
        response = client.post(path, json=body)
        assert response.status_code == 200, response.text
        if path == "/register":
            assert response.json() is None
        elif path == "/_prepare_backend_for_training":
            assert response.json() == [server.inference_url, "default"]
        elif path == "/_get_step":
            steps_seen.append(response.json())
        elif path == "/_delete_checkpoint_files":
            assert response.json() is None
            assert checkpoints(server) == sorted(set(body["steps_to_keep"]))
    assert steps_seen == [0, 1, 1, 2]
    assert checkpoints(server) == [1, 2]
    # the client's base_path (".art", relative to the server's working directory) was not used
    assert not (REPO / ".art" / "nat-project").exists()


def test_the_trained_steps_are_served_under_arts_names(server: ArtServer, tiny: str) -> None:
    test_name = "served"
    model = {"name": test_name, "project": "nat-project", "trainable": True, "base_model": tiny}
    api = httpx.Client(base_url=server.api_url, timeout=300)
    assert api.post("/register", json=model).status_code == 200
    base_url, key = api.post(
        "/_prepare_backend_for_training", json={"model": model, "config": None}
    ).json()
    inference = httpx.Client(base_url=base_url, timeout=300)
    assert inference.get("/models").status_code == 401
    inference.headers["Authorization"] = f"Bearer {key}"
    names = {item["id"] for item in inference.get("/models").json()["data"]}
    assert {test_name, f"{test_name}@0"} <= names
    answer = inference.post(
        "/chat/completions",
        json={
            "model": f"{test_name}@0",
            "messages": [{"role": "user", "content": "Hello"}],
            "max_tokens": 4,
            "logprobs": True,
        },
    )
    assert answer.status_code == 200, answer.text
    content = answer.json()["choices"][0]["logprobs"]["content"]
    assert content and all(entry["token"].startswith("token_id:") for entry in content)
    missing = inference.post(
        "/chat/completions",
        json={"model": "nobody@0", "messages": [{"role": "user", "content": "x"}]},
    )
    assert missing.status_code == 404


def _model(tiny: str, name: str) -> dict[str, Any]:
    return {"name": name, "project": "nat-project", "trainable": True, "base_model": tiny}


def _train_body(tiny: str, name: str, tokens: list[str]) -> dict[str, Any]:
    choice = {
        "index": 0,
        "finish_reason": "stop",
        "message": {"role": "assistant", "content": "x"},
        "logprobs": {
            "content": [
                {"token": t, "logprob": -1.0, "bytes": None, "top_logprobs": []} for t in tokens
            ]
        },
    }
    trajectories = [
        {"messages_and_choices": [{"role": "user", "content": "hi"}, choice], "reward": r}
        for r in (0.0, 1.0)
    ]
    return {
        "model": _model(tiny, name),
        "trajectory_groups": [{"trajectories": trajectories}],
        "config": {"learning_rate": 1e-5, "kl_penalty_coef": 0.0},
        "dev_config": {},
        "verbose": False,
    }


@pytest.mark.parametrize(
    ("path", "content", "status", "detail"),
    [
        ("/_get_step", b"{", 400, "not JSON"),
        ("/_get_step", b"[1]", 400, "JSON object"),
        ("/_get_step", b'{"project": "p"}', 422, "has no 'name'"),
        ("/register", b'{"name": "../x", "project": "p"}', 422, "safe path segment"),
        ("/register", b'{"name": "x", "project": "p", "trainable": true}', 422, "base_model"),
        ("/_delete_checkpoint_files", b'{"steps_to_keep": [1]}', 422, "no 'model'"),
        # a folder that is not a model and a path that does not exist: one answer, no probing
        (
            "/register",
            b'{"name": "x1", "project": "p", "trainable": true, "base_model": "/etc"}',
            422,
            "cannot be loaded by this server's backend",
        ),
        (
            "/_get_step",
            b'{"name": "x2", "project": "p", "trainable": true, "base_model": "/no/such/dir"}',
            422,
            "cannot be loaded by this server's backend",
        ),
        (
            "/register",
            b'{"name": "x3", "project": "p", "trainable": true, "base_model": "a\\u0000b"}',
            422,
            "printable characters",
        ),
        ("/_train_model", b'{"model": {"name": "a", "project": "p"}}', 422, "trajectory_groups"),
        ("/nothing", b"{}", 404, "Not Found"),
    ],
)
def test_bad_requests_are_4xx_in_arts_shape(
    server: ArtServer, path: str, content: bytes, status: int, detail: str
) -> None:
    response = httpx.post(
        server.api_url + path,
        content=content,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert response.status_code == status, response.text
    body = response.json()
    assert list(body) == ["detail"] and detail in body["detail"]


def test_bad_trajectories_and_oversized_heads_are_refused(server: ArtServer, tiny: str) -> None:
    client = httpx.Client(base_url=server.api_url, timeout=300)
    bad = client.post("/_train_model", json=_train_body(tiny, "badtokens", ["hello"]))
    assert bad.status_code == 422 and "token_id:N" in bad.json()["detail"]
    assert client.post("/_get_step", json=_model(tiny, "badtokens")).json() == 0
    big = client.post("/_get_step", json=_model(tiny, "badtokens"), headers={"x-big": "a" * 70_000})
    assert big.status_code == 431 and "detail" in big.json()
    wrong_method = client.get("/_get_step")
    assert wrong_method.status_code == 405 and "detail" in wrong_method.json()


def test_a_client_that_leaves_mid_update_stops_nothing(server: ArtServer, tiny: str) -> None:
    """The stream is dropped right after its head arrives; the update still completes, the
    next /_get_step says so, and the next update trains from there."""
    client = httpx.Client(base_url=server.api_url, timeout=300)
    model = _model(tiny, "leaver")
    assert client.post("/register", json=model).status_code == 200
    body = _train_body(tiny, "leaver", ["token_id:5", "token_id:6"])
    with client.stream("POST", "/_train_model", json=body) as response:
        assert response.status_code == 200
    deadline = time.monotonic() + 120
    while client.post("/_get_step", json=model).json() != 1:
        assert time.monotonic() < deadline, "the abandoned update never completed"
        time.sleep(0.2)
    assert checkpoints(server, "leaver") == [0, 1]
    train_lines(client, body)
    assert client.post("/_get_step", json=model).json() == 2


def test_keys_guard_the_api_and_the_inference_server(tmp_path: Path, tiny: str) -> None:
    keys = tmp_path / "keys.txt"
    secret = "nat-key-0123456789abcdef"
    keys.write_text(f"team:{secret}\n")
    server = start_art_server(tmp_path / "runs", extra_args=["--keys", str(keys)])
    try:
        model = _model(tiny, "keyed")
        refused = httpx.post(server.api_url + "/register", json=model, timeout=60)
        assert refused.status_code == 401 and "detail" in refused.json()
        assert httpx.get(server.api_url + "/healthcheck", timeout=60).json() == {"status": "ok"}
        client = httpx.Client(
            base_url=server.api_url, headers={"Authorization": f"Bearer {secret}"}, timeout=300
        )
        assert client.post("/register", json=model).status_code == 200
        prepared = client.post(
            "/_prepare_backend_for_training",
            json={"model": model, "config": {"server_args": {"api_key": "default"}}},
        ).json()
        assert prepared == [server.inference_url, secret]
        inference = httpx.Client(base_url=server.inference_url, timeout=60)
        default = inference.get("/models", headers={"Authorization": "Bearer default"})
        assert default.status_code == 401
        ok = inference.get("/models", headers={"Authorization": f"Bearer {secret}"})
        assert "keyed@0" in {item["id"] for item in ok.json()["data"]}
    finally:
        server.stop()


def test_a_stopped_server_rolls_the_update_back_and_frees_its_ports(
    tmp_path: Path, tiny: str
) -> None:
    """SIGTERM while an update runs: the update is rolled back (no step, no partial files),
    its client is answered rather than left waiting, the process exits, and both ports are
    free at once for a restart, which trains from the last checkpoint."""
    pause = tmp_path / "pause"
    pause.mkdir()
    env = {PAUSE_DIR_ENV: str(pause)}
    backend = "tests._art_server:pausable_backend"
    server = start_art_server(tmp_path / "runs", backend=backend, env=env)
    api_port = int(server.api_url.rsplit(":", 1)[1])
    inference_port = int(server.inference_url.split(":")[2].split("/")[0])
    model = _model(tiny, "stopped")
    body = _train_body(tiny, "stopped", ["token_id:5", "token_id:6"])
    outcome: list[Any] = []

    def train() -> None:
        try:
            url = server.api_url + "/_train_model"
            with httpx.stream("POST", url, json=body, timeout=120) as response:
                outcome.append((response.status_code, response.read()))
        except httpx.HTTPError as exc:
            outcome.append(exc)

    try:
        assert httpx.post(server.api_url + "/register", json=model, timeout=120).status_code == 200
        (pause / "pause").touch()
        thread = threading.Thread(target=train)
        thread.start()
        deadline = time.monotonic() + 120
        while not (pause / "paused").exists():
            assert time.monotonic() < deadline, "the update never started"
            time.sleep(0.05)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=60) == 0, server.log_text()[-3000:]
        thread.join(timeout=60)
        assert len(outcome) == 1
        if isinstance(outcome[0], tuple):  # answered before the process ended
            status, content = outcome[0]
            assert status == 503 and b"rolled back" in content, outcome
        assert "stopped during the update; rolled back" in server.log_text()
    finally:
        server.stop()
        (pause / "pause").unlink(missing_ok=True)
    restarted = start_art_server(
        tmp_path / "runs",
        port=api_port,
        inference_port=inference_port,
        backend=backend,
        env=env,
    )
    try:
        client = httpx.Client(base_url=restarted.api_url, timeout=300)
        assert client.post("/_get_step", json=model).json() == 0
        folder = restarted.base_path / "nat-project" / "models" / "stopped" / "checkpoints"
        assert sorted(p.name for p in folder.iterdir()) == ["0000"]
        train_lines(client, body)
        assert client.post("/_get_step", json=model).json() == 1
    finally:
        restarted.stop()


def test_the_recorded_session_trains_on_tinker_too(tmp_path: Path, tiny: str) -> None:
    """The same NAT session over TinkerBackend (the real tinker SDK against arthex's Tinker
    emulator): the protocol does not depend on the LocalBackend."""
    pytest.importorskip("tinker")
    from arthex.emulators.tinker import TinkerEmulator

    state_dir = str(tmp_path / "tinker-state")
    with TinkerEmulator(tiny, api_key=TINKER_KEY, state_dir=state_dir, torch_threads=1) as emulator:
        env = {TINKER_URL_ENV: emulator.base_url, "TINKER_TELEMETRY": "0"}
        server = start_art_server(
            tmp_path / "runs", backend="tests._art_server:tinker_backend", env=env
        )
        try:
            client = httpx.Client(base_url=server.api_url, timeout=300)
            steps_seen = []
            key = ""
            for request in [r for r in recorded_requests(tiny) if r["port"] == "api"]:
                path, body = request["path"], request["body"]
                if path == "/_train_model":
                    lines = train_lines(client, body)
                    assert lines and all(
                        isinstance(v, int | float) for line in lines for v in line.values()
                    )
                    continue
                response = client.post(path, json=body)
                assert response.status_code == 200, response.text
                if path == "/_get_step":
                    steps_seen.append(response.json())
                elif path == "/_prepare_backend_for_training":
                    key = response.json()[1]
            assert steps_seen == [0, 1, 1, 2]
            listed = httpx.get(
                server.inference_url + "/models",
                headers={"Authorization": f"Bearer {key}"},
                timeout=60,
            ).json()
            names = {item["id"] for item in listed["data"]}
            assert {"agent", "agent@2"} <= names and "agent@0" not in names
        finally:
            server.stop()


def test_conflicting_registrations_are_409(server: ArtServer, tiny: str) -> None:
    """The inference server serves by name, so one name is one run; and a run keeps its base
    model."""
    client = httpx.Client(base_url=server.api_url, timeout=300)
    first = {"name": "dup", "project": "one", "trainable": True, "base_model": tiny}
    assert client.post("/register", json=first).status_code == 200
    other_project = client.post("/register", json={**first, "project": "two"})
    assert other_project.status_code == 409
    assert "already registered in project 'one'" in other_project.json()["detail"]
    other_base = client.post("/_get_step", json={**first, "base_model": tiny + "-other"})
    assert other_base.status_code == 409 and "base_model" in other_base.json()["detail"]
    # a prompted model (trainable false) needs nothing of the server
    prompted = {"name": "gpt", "project": "one", "trainable": False}
    assert client.post("/register", json=prompted).json() is None
    assert client.post("/_get_step", json=prompted).json() == 0


def test_a_port_already_taken_is_one_line_and_exit_1(tmp_path: Path) -> None:
    """8000 and 7999 are often taken (vLLM, another server): say so in one line."""
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "arthex.apps.cli", "serve", "--protocol", "art",
             "--backend", "inmemory", "--port", str(port), "--inference-port", "0",
             "--base-path", str(tmp_path / "art")],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("arthex serve:") and str(port) in last, done.stderr[-2000:]


def test_two_clients_training_at_once_each_get_their_own_step(server: ArtServer, tiny: str) -> None:
    """Two NAT clients on one model and a third on another, all training at the same time:
    the updates of one model are serialised (steps 1 and 2, no step lost or shared), the
    other model trains beside them, and every stream ends with its own numbers."""
    import threading

    for name in ("shared", "beside"):
        with httpx.Client(base_url=server.api_url, timeout=300) as client:
            assert client.post("/register", json=_model(tiny, name)).status_code == 200
    bodies = [
        _train_body(tiny, "shared", ["token_id:5", "token_id:6"]),
        _train_body(tiny, "shared", ["token_id:7", "token_id:8"]),
        _train_body(tiny, "beside", ["token_id:9", "token_id:10"]),
    ]
    results: dict[int, list[dict[str, Any]]] = {}
    start = threading.Barrier(len(bodies))

    def train(index: int) -> None:
        with httpx.Client(base_url=server.api_url, timeout=300) as client:
            start.wait()
            results[index] = train_lines(client, bodies[index])

    threads = [threading.Thread(target=train, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert sorted(results) == [0, 1, 2], "every stream ended"
    assert all(lines and all(isinstance(v, int | float) for v in lines[-1].values())
               for lines in results.values())  # fmt: skip
    with httpx.Client(base_url=server.api_url, timeout=60) as client:
        assert client.post("/_get_step", json=_model(tiny, "shared")).json() == 2
        assert client.post("/_get_step", json=_model(tiny, "beside")).json() == 1
    assert checkpoints(server, "shared") == [0, 1, 2]
    assert checkpoints(server, "beside") == [0, 1]


def test_idle_connections_stay_open_past_the_openai_clients_own_keep_alive(
    server: ArtServer,
) -> None:
    """Neither of the two servers closes a kept-alive connection while ART's client (httpx)
    may still reuse it: at uvicorn's 5 s a request sent as it closed got no answer."""
    from openai._constants import DEFAULT_CONNECTION_LIMITS

    from tests._serverless import statuses_around_an_idle_wait

    expiry = DEFAULT_CONNECTION_LIMITS.keepalive_expiry
    assert expiry is not None
    urls = [server.api_url, server.inference_url.removesuffix("/v1")]

    async def both() -> list[list[bytes]]:
        waits = [statuses_around_an_idle_wait(u.rstrip("/"), "/no-such-route", expiry + 1.0)
                 for u in urls]  # fmt: skip
        return list(await asyncio.gather(*waits))

    for first, again in asyncio.run(both()):
        assert again == first
