"""The six findings of an outside review of `arthex serve`, each tested against a real server
process on loopback, the way the reviewer found them:

1. a tenant's 404 on the OpenAI proxy named other tenants' models;
2. model ids were a plain hash of the names, computable on any machine;
3. bad input (deep JSON, a base_model that is a directory but not a model, non-ASCII digits)
   gave 500s, and deep JSON dropped the kept-alive connection;
4. a header of any size was buffered whole before the 401;
5. one request could cost the server two to four times the body cap;
6. bad CLI options crashed with a traceback or started a server that refuses everything.

Memory is read from the kernel's own peak for the server process (VmHWM), on a fresh server
per measurement, against bounds with a wide margin on either side: the old code passes the
body cap or the header size outright, the new one stays far below it.
"""

from __future__ import annotations

import hashlib
import json
import re
import select
import stat
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._serverless import (
    REPO,
    STEP_DELAY_ENV,
    RawConnection,
    ServerProcess,
    launch_server,
    make_keys,
    peak_rss_mib,
    rss_mib,
    start_server,
)
from tests.e2e.test_serverless_security import Unchanged, groups_json, http, register, wait_done

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024
BODY_CAP = 32 * MIB
HEADER_CAP = 64 * 1024  # the server's default
ANY_MODEL_ID = re.compile(r"m[0-9a-f]{24}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start_server(
        tmp_path_factory.mktemp("hardening") / "state",
        backend="tests._serverless:slow_backend",
        extra_args=["--max-body-bytes", str(BODY_CAP)],
        env={STEP_DELAY_ENV: "0"},
    )
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server of its own, so its peak memory belongs to one test."""
    process = start_server(tmp_path / "state", extra_args=["--max-body-bytes", str(BODY_CAP)])
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    """The LocalBackend with the tiny model: a real inference server behind the proxy, and a
    backend that really tries to load what base_model names."""
    pytest.importorskip("torch")
    from arthex.testing.tiny_model import tiny_model

    pending = launch_server(tmp_path_factory.mktemp("hardening-local") / "state", backend="local")
    tiny = tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")
    process = pending.wait()
    try:
        yield process, tiny
    finally:
        process.stop()


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


# --- 1. no cross-tenant leak through the proxy -----------------------------------------------


@pytest.mark.slow
def test_a_missing_step_of_ones_own_model_names_no_other_tenants_model(
    local_server: tuple[ServerProcess, str],
) -> None:
    server, tiny = local_server
    alice_tenant, alice_key = server.fresh_tenant()
    alice, bob = http(server, alice_key), http(server, server.fresh_key())
    mine = alice.post("/preview/models", json={"project": "p", "name": "agent", "base_model": tiny})
    theirs = bob.post(
        "/preview/models", json={"project": "hidden", "name": "bobs-agent", "base_model": tiny}
    )
    assert mine.status_code == theirs.status_code == 201, (mine.text, theirs.text)
    bobs_id = theirs.json()["id"]
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    # Bob's model is served (the proxy reaches it by its id).
    assert bob.post("/v1/chat/completions", json={**chat, "model": "bobs-agent"}).is_success
    for path in ("/v1/chat/completions", "/v1/projects/p/chat/completions"):
        answer = alice.post(path, json={**chat, "model": "agent@99"})
        assert answer.status_code == 404, answer.text
        assert "agent@99" in answer.json()["error"]["message"]
        assert bobs_id not in answer.text and "bobs-agent" not in answer.text
        assert ANY_MODEL_ID.search(answer.text) is None, answer.text
    listed = alice.get("/v1/models").json()["data"]
    named = f"wandb-artifact:///{alice_tenant}/p/agent"
    assert sorted(m["id"] for m in listed) == ["agent", "agent@0", named, f"{named}:step0"]


# --- 2. ids are not computable elsewhere -----------------------------------------------------


def test_model_ids_depend_on_a_secret_of_the_server(server: ServerProcess, tmp_path: Path) -> None:
    tenant, key = server.fresh_tenant()
    client = http(server, key)
    first = register(client, "proj", "agent")
    plain_hash = "m" + hashlib.sha256(f"{tenant}\0proj\0agent".encode()).hexdigest()[:24]
    assert first != plain_hash, "the id is computable from the names alone"
    assert register(client, "proj", "agent") == first, "a retried register finds the same model"

    other = start_server(tmp_path / "other", keys=server.keys)
    try:
        elsewhere = register(http(other, key), "proj", "agent")
    finally:
        other.stop()
    assert elsewhere != first, "another server gives the same names another id"
    secret = tmp_path / "other" / "server-secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    again = start_server(tmp_path / "other", keys=server.keys)
    try:
        assert register(http(again, key), "proj", "agent") == elsewhere, "kept across a restart"
    finally:
        again.stop()


# --- 3. bad input is a 4xx, and the connection survives it -----------------------------------


def test_deeply_nested_json_is_400_on_every_json_route_and_the_connection_stays_usable(
    server: ServerProcess,
) -> None:
    key = server.fresh_key()
    model = register(http(server, key), "proj", "agent")
    deep_list = b"[" * 100_000
    deep_field = b'{"project": "proj", "name": "x", "config": ' + b'{"a": ' * 100_000
    routes = [
        ("POST", "/preview/models"),
        ("DELETE", f"/preview/models/{model}/checkpoints"),
        ("POST", "/preview/training-jobs"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/projects/proj/chat/completions"),
    ]
    with Unchanged(server), RawConnection(server.url) as conn:
        for method, path in routes:
            for body in (deep_list, deep_field):
                status, _, answer = conn.request(method, path, auth(key), body)
                assert status == 400, (method, path, answer[:300])
                assert "nested" in json.loads(answer)["error"]["message"]
                # The same connection answers the next request.
                status, _, listing = conn.request("GET", "/preview/models", auth(key))
                assert status == 200 and json.loads(listing)["data"][0]["id"] == model


@pytest.mark.parametrize("digits", ["²", "١٢", "12³", "٣"])
def test_non_ascii_digits_in_queries_are_422_and_the_connection_stays_usable(
    server: ServerProcess, digits: str
) -> None:
    key = server.fresh_key()
    client = http(server, key)
    model = register(client, "proj", "agent")
    job = client.post(
        "/preview/training-jobs", json={"model_id": model, "trajectory_groups": groups_json()}
    ).json()["id"]
    wait_done(client, job)
    quoted = urllib.parse.quote(digits)
    with Unchanged(server), RawConnection(server.url) as conn:
        for query in ("after", "limit", "wait"):
            path = f"/preview/training-jobs/{job}/events?{query}={quoted}"
            status, _, answer = conn.request("GET", path, auth(key))
            assert status == 422, (query, answer)
            assert query in json.loads(answer)["error"]["message"]
        chat = json.dumps({"model": f"agent@{digits}", "messages": []}).encode()
        status, _, answer = conn.request("POST", "/v1/chat/completions", auth(key), chat)
        assert status == 422, answer
        status, _, _ = conn.request("GET", f"/preview/training-jobs/{job}", auth(key))
        assert status == 200


def test_an_unexpected_server_fault_is_a_500_on_a_connection_that_stays_usable(
    tmp_path: Path,
) -> None:
    faulty = start_server(tmp_path / "state", backend="tests._serverless:faulty_backend")
    try:
        key = faulty.fresh_key()
        model = register(http(faulty, key), "proj", "agent")
        with RawConnection(faulty.url) as conn:
            status, _, answer = conn.request(
                "GET", f"/preview/models/{model}/checkpoints", auth(key)
            )
            assert status == 500, answer
            assert json.loads(answer)["error"]["type"] == "internal_error"
            assert str(faulty.state_dir) not in answer.decode()
            status, _, _ = conn.request("GET", "/preview/models", auth(key))
            assert status == 200
    finally:
        faulty.stop()


@pytest.mark.slow
def test_a_base_model_that_is_no_model_gets_one_answer_whether_or_not_the_path_exists(
    local_server: tuple[ServerProcess, str], tmp_path: Path
) -> None:
    server, _ = local_server
    client = http(server, server.fresh_key())
    not_a_model = tmp_path / "just-a-folder"
    not_a_model.mkdir()
    (not_a_model / "notes.txt").write_text("not a model")
    candidates = [not_a_model, tmp_path / "no-such-folder", tmp_path / "notes.txt"]
    (tmp_path / "notes.txt").write_text("a file")
    answers = set()
    with Unchanged(server):
        for index, path in enumerate(candidates):
            response = client.post(
                "/preview/models",
                json={"project": "p", "name": f"probe-{index}", "base_model": str(path)},
            )
            message = response.json()["error"]["message"].replace(str(path), "<path>")
            answers.add((response.status_code, message))
    assert len(answers) == 1, answers
    ((status, message),) = answers
    assert status == 422 and "base_model" in message


# --- 4. headers are capped, and refused before they are buffered ----------------------------


def send_oversized_header(conn: RawConnection, size: int) -> tuple[int, dict[str, Any]]:
    """A 32 MiB header, sent until the server answers; (status, error body)."""
    conn.sock.sendall(b"GET /preview/models HTTP/1.1\r\nHost: t\r\nX-Pad: ")
    piece = b"a" * MIB
    try:
        for _ in range(size // MIB):
            if select.select([conn.sock], [], [], 0)[0]:
                break  # answered already
            conn.sock.sendall(piece)
        else:
            conn.sock.sendall(b"\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    status, _, body = conn.read_response()
    return status, json.loads(body) if body else {}


def test_an_oversized_header_is_431_before_authentication_without_buffering_it(
    fresh_server: ServerProcess,
) -> None:
    pid = fresh_server.process.pid
    with RawConnection(fresh_server.url) as conn:  # warm up the request path
        assert conn.request("GET", "/preview/models")[0] == 401
    before = peak_rss_mib(pid)
    with RawConnection(fresh_server.url) as conn:
        status, body = send_oversized_header(conn, 32 * MIB)
    grown = peak_rss_mib(pid) - before
    assert status == 431, body
    assert body["error"]["type"] == "request_headers_too_large"
    assert grown < 8, f"the server's peak memory grew {grown:.1f} MiB for a 32 MiB header"
    with RawConnection(fresh_server.url) as conn:
        # Just under the cap is a request like any other (here: no key, so 401).
        pad = "a" * (HEADER_CAP - 1024)
        assert conn.request("GET", "/preview/models", {"X-Pad": pad})[0] == 401
        many = {f"X-H{i}": "1" for i in range(150)}
        status, _, answer = conn.request(
            "GET", "/preview/models", {**many, "Authorization": "Bearer x"}
        )
        assert status == 431, answer
        assert "headers" in json.loads(answer)["error"]["message"]


# --- 5. one request holds its body at most once -----------------------------------------------


def test_a_request_costs_at_most_its_body_once(fresh_server: ServerProcess) -> None:
    pid = fresh_server.process.pid
    key = fresh_server.fresh_key()
    with RawConnection(fresh_server.url) as conn:
        assert conn.request("GET", "/preview/models", auth(key))[0] == 200  # warm up
    before = peak_rss_mib(pid)
    with RawConnection(fresh_server.url) as conn:
        conn.send_head(
            "POST",
            "/preview/training-jobs",
            {**auth(key), "Transfer-Encoding": "chunked"},
        )
        chunk = b"%x\r\n" % MIB + b"x" * MIB + b"\r\n"
        try:
            for _ in range(200):
                if select.select([conn.sock], [], [], 0)[0]:
                    break
                conn.sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, _, _ = conn.read_response()
    streamed = peak_rss_mib(pid) - before
    assert status == 413
    assert streamed < BODY_CAP / MIB / 4, f"a refused 200 MB stream grew the peak {streamed} MiB"

    before = rss_mib(pid)
    body = b"<" + b"x" * (BODY_CAP - 1024)  # read whole, refused at the first byte parsed
    with RawConnection(fresh_server.url) as conn:
        status, _, answer = conn.request("POST", "/preview/training-jobs", auth(key), body)
    held = peak_rss_mib(pid) - before
    assert status == 400, answer
    assert held <= 1.2 * BODY_CAP / MIB, f"a {BODY_CAP // MIB} MiB body cost {held:.1f} MiB"
    assert list((fresh_server.state_dir / "tmp").iterdir()) == [], "no spooled body is left"


# --- 6. CLI options are checked at start ------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "option", "entry"),
    [
        (["--max-body-bytes", "-1"], "--max-body-bytes", "module"),
        (["--max-body-bytes", "-1"], "--max-body-bytes", "cli"),  # `arthex serve`
        (["--max-body-bytes", "١٢"], "--max-body-bytes", "module"),
        (["--log-level", "loud"], "--log-level", "cli"),
        (["--port", "99999"], "--port", "module"),
        # paths the server could not create its state or audit log under ({tmp} holds a file)
        (["--state-dir", "{tmp}/a-file/state"], "--state-dir", "cli"),
        (["--audit-log", "{tmp}/a-file/audit.jsonl"], "--audit-log", "module"),
        (["--audit-log", "{tmp}"], "--audit-log", "cli"),
    ],
)
def test_bad_options_stop_the_server_at_start_with_one_line(
    tmp_path: Path, args: list[str], option: str, entry: str
) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("".join(f"{t}:{k}\n" for t, k in make_keys(1).items()))
    (tmp_path / "a-file").write_text("not a folder\n")
    args = [arg.format(tmp=tmp_path) for arg in args]
    command = (
        [sys.executable, "-m", "arthex.apps.server"]
        if entry == "module"
        else [sys.executable, "-c", "from arthex.apps.cli.main import main; main()", "serve"]
    )
    state = tmp_path / "state"
    common = ["--backend", "inmemory", "--keys", str(keys), "--state-dir", str(state)]
    try:
        done = subprocess.run(
            [*command, *common, *args], cwd=REPO, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"`{' '.join(args)}` started a server instead of refusing the option")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and option in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not state.exists(), "nothing is created for a refused start"


def test_trace_log_level_starts_a_working_server(tmp_path: Path) -> None:
    process = start_server(tmp_path / "state", extra_args=["--log-level", "TRACE"])
    try:
        key = process.fresh_key()
        assert http(process, key).get("/preview/backend").status_code == 200
    finally:
        process.stop()
