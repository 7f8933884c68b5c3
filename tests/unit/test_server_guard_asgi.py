"""The training server's Guard called as the ASGI server calls it (a scope, `receive` and
`send`): which requests reach the route, and the status, headers and body of each refusal,
with sizes worked out by hand from the request as it goes on the wire."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest

from arthex.adapters.inference.asgi import Receive, Scope, Send
from arthex.apps.server.bodies import BODY_SCOPE_KEY
from arthex.apps.server.guard import OPEN_TENANT, TENANT_SCOPE_KEY, Guard
from arthex.apps.server.keys import KeyRing
from arthex.apps.server.limits import ServerLimits
from tests.faults._tiny_disk import fill, tiny_disk

KEY = "k" * 20
KEYS = KeyRing.parse(f"team-a:{KEY}", "test keys")
AUTH = (b"authorization", f"Bearer {KEY}".encode())


class Route:
    """The app behind the guard: records what reached it and answers 200 with the body."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.seen.append(dict(scope))
        body = b""
        if scope["type"] == "http":
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


def call(
    guard: Guard, headers: list[tuple[bytes, bytes]], body: bytes = b"", **scope: Any
) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[MutableMapping[str, Any]] = []
    chunks = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    full = {
        "type": "http",
        "method": "POST",
        "raw_path": b"/v1/x",
        "query_string": b"",
        "headers": headers,
        **scope,
    }
    asyncio.run(guard(full, receive, send))
    start, end = sent
    return start["status"], dict(start["headers"]), end["body"]


def guard_of(route: Route, **limits: Any) -> Guard:
    return Guard(route, keys=KEYS, limits=ServerLimits(**limits))


def test_a_request_with_its_key_reaches_the_route_as_its_tenant_with_its_body() -> None:
    route = Route()
    status, _, body = call(guard_of(route), [AUTH], b'{"a": 1}')
    assert (status, body) == (200, b'{"a": 1}')
    (scope,) = route.seen
    assert scope[TENANT_SCOPE_KEY] == "team-a"
    assert scope[BODY_SCOPE_KEY].size == 8


def test_lifespan_passes_through_and_an_open_guard_names_every_caller_open() -> None:
    route = Route()
    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {}

    asyncio.run(guard_of(route)({"type": "lifespan"}, receive, send))
    assert route.seen == [{"type": "lifespan"}]
    open_guard = Guard(route, keys=None, limits=ServerLimits())
    assert call(open_guard, [])[0] == 200
    assert route.seen[-1][TENANT_SCOPE_KEY] == OPEN_TENANT


def test_a_missing_or_wrong_key_is_refused_with_401_naming_the_scheme() -> None:
    route = Route()
    guard = guard_of(route)
    expected = {
        "error": {
            "message": "missing or wrong API key; send 'Authorization: Bearer <key>'",
            "type": "authentication_error",
            "param": None,
            "code": 401,
        }
    }
    for headers in (
        [],
        [(b"authorization", b"Bearer " + b"x" * 20)],
        [(b"authorization", f"Basic {KEY}".encode())],
        [(b"authorization", b"Bearer    ")],
        [(b"authorization", KEY.encode())],
    ):
        status, sent_headers, body = call(guard, headers)
        assert status == 401
        assert sent_headers[b"www-authenticate"] == b"Bearer"
        assert json.loads(body) == expected
    # the scheme is case-insensitive and spaces around the key are not part of it
    assert call(guard, [(b"authorization", f"bearer  {KEY} ".encode())])[0] == 200
    assert route.seen[-1][TENANT_SCOPE_KEY] == "team-a"
    assert len(route.seen) == 1


def test_the_head_is_measured_as_sent_and_refused_one_byte_past_the_cap() -> None:
    # "POST /v1/x HTTP/1.1\r\n" is 4 + 1 + 5 + 11 = 21 bytes, counted with the "?" a query
    # would need (22); each header line is name + ": " + value + "\r\n"; the head ends "\r\n".
    fixed = len("POST") + len(b"/v1/x") + 1 + 12 + 2
    name = b"x-pad"
    line = len(AUTH[0]) + len(AUTH[1]) + 4
    room = 1024 - fixed - line - len(name) - 4  # the pad's value that makes the head 1024
    route = Route()
    guard = guard_of(route, max_header_bytes=1024)
    assert call(guard, [AUTH, (name, b"v" * room)])[0] == 200
    status, headers, body = call(guard, [AUTH, (name, b"v" * (room + 1))])
    assert status == 431
    assert headers[b"connection"] == b"close"
    assert json.loads(body)["error"] == {
        "message": "the request line and headers are larger than this server accepts "
        "(1024 bytes); send smaller headers",
        "type": "request_headers_too_large",
        "param": None,
        "code": 431,
    }
    # the query string counts too
    status, _, _ = call(guard, [AUTH, (name, b"v" * room)], query_string=b"q")
    assert status == 431
    assert len(route.seen) == 1


def test_more_headers_than_the_cap_are_refused() -> None:
    route = Route()
    guard = guard_of(route, max_headers=8)
    pads = [(f"x-{i}".encode(), b"1") for i in range(7)]
    assert call(guard, [AUTH, *pads])[0] == 200
    status, _, body = call(guard, [AUTH, *pads, (b"x-8", b"1")])
    assert status == 431
    assert json.loads(body)["error"]["message"] == (
        "the request has more headers than this server accepts (8); send fewer"
    )
    assert len(route.seen) == 1


def test_a_key_past_its_rate_gets_429_with_retry_after_and_the_hook_is_told() -> None:
    route = Route()
    told: list[bool] = []
    now = [100.0]
    guard = Guard(
        route,
        keys=KEYS,
        limits=ServerLimits(rate_per_s=0.25, rate_burst=1),
        on_rate_limited=lambda: told.append(True),
        clock=lambda: now[0],
    )
    assert call(guard, [AUTH])[0] == 200
    status, headers, body = call(guard, [AUTH])
    assert status == 429
    assert headers[b"retry-after"] == b"4"  # one token every 4 s, none left
    assert json.loads(body)["error"] == {
        "message": "this API key sent more than 0.25 requests a second (bursts of 1); retry "
        "after the Retry-After header's seconds",
        "type": "rate_limit_exceeded",
        "param": None,
        "code": 429,
    }
    assert told == [True]
    now[0] += 4.0
    assert call(guard, [AUTH])[0] == 200


def test_a_body_past_the_cap_is_refused_with_413_and_one_at_it_is_taken() -> None:
    route = Route()
    guard = guard_of(route, max_body_bytes=1024)
    assert call(guard, [AUTH], b"a" * 1024)[0] == 200
    status, headers, body = call(guard, [AUTH], b"a" * 1025)
    assert status == 413
    assert headers[b"connection"] == b"close"
    assert json.loads(body)["error"] == {
        "message": "the request body is larger than this server accepts (1024 bytes); send "
        "fewer trajectory groups per request",
        "type": "request_too_large",
        "param": None,
        "code": 413,
    }
    assert len(route.seen) == 1


def test_each_key_has_its_own_bucket_and_a_wait_under_a_second_still_refuses() -> None:
    keys = KeyRing.parse(f"team-a:{KEY}\nteam-b:{'b' * 20}", "test keys")
    route = Route()
    guard = Guard(
        route,
        keys=keys,
        limits=ServerLimits(rate_per_s=2.0, rate_burst=1),
        clock=lambda: 0.0,
    )
    assert call(guard, [AUTH])[0] == 200
    status, headers, _ = call(guard, [AUTH])
    assert (status, headers[b"retry-after"]) == (429, b"1")  # half a second, rounded up
    assert call(guard, [(b"authorization", b"Bearer " + b"b" * 20)])[0] == 200


def test_refusals_take_the_protocols_error_shape() -> None:
    def detail(status: int, message: str, kind: str) -> dict[str, Any]:
        return {"detail": message}

    guard = Guard(Route(), keys=KEYS, limits=ServerLimits(), error_shape=detail)
    status, _, body = call(guard, [])
    assert status == 401
    assert json.loads(body) == {
        "detail": "missing or wrong API key; send 'Authorization: Bearer <key>'"
    }


def test_the_body_leaves_the_scope_once_the_route_is_done_and_a_head_without_headers_passes(
    tmp_path: Path,
) -> None:
    route = Route()
    guard = Guard(route, keys=None, limits=ServerLimits(), spool_dir=lambda: str(tmp_path))
    scope: dict[str, Any] = {"type": "http", "method": "GET", "raw_path": b"/"}
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(guard(scope, receive, send))
    assert sent[0]["status"] == 200
    assert BODY_SCOPE_KEY in route.seen[0]
    assert BODY_SCOPE_KEY not in scope


def test_a_body_without_its_length_that_fills_the_spool_disk_gets_507_and_the_log_names_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def detail(status: int, message: str, kind: str) -> dict[str, Any]:
        return {"status": status, "detail": message, "kind": kind}

    route = Route()
    with tiny_disk(tmp_path / "disk", 8) as disk:
        guard = Guard(
            route,
            keys=None,
            limits=ServerLimits(max_body_bytes=64 << 20, spool_threshold_bytes=1024),
            spool_dir=lambda: str(disk),
            error_shape=detail,
        )
        fill(disk, leave=1 << 20)
        chunks = [b"x" * (1 << 20)] * 4
        sent: list[MutableMapping[str, Any]] = []

        async def receive() -> dict[str, Any]:
            chunk = chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        with caplog.at_level(logging.ERROR, logger="arthex"):
            asyncio.run(guard({"type": "http", "headers": []}, receive, send))
        logged = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(logged) == 1
        assert logged[0].startswith(f"no space left on the disk of {disk}: the write needs ")
    assert sent[0]["status"] == 507
    assert dict(sent[0]["headers"])[b"connection"] == b"close"
    body = json.loads(sent[1]["body"])
    assert body["status"] == 507 and body["kind"] == "insufficient_storage"
    # no Content-Length: the bytes it needs are those received before the disk filled, plus one
    needed = int(body["detail"].split("-byte request")[0].rsplit(" ", 1)[1])
    assert 0 < needed <= (1 << 20) * 2
    assert body["detail"] == (
        f"the server has no disk space left to hold this {needed}-byte request; retry later "
        "(its operator was told what to free)"
    )
    assert route.seen == []
