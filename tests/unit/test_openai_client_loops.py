"""A model's `openai_client()` in a script that runs two event loops one after the other
(`asyncio.run(setup())`, then `asyncio.run(train())`): the second loop gets a client of its
own. The first client's pooled keep-alive connection belongs to the first loop; reusing it
from the second fails with "Event loop is closed". Against a real keep-alive HTTP server on
loopback."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import arthex

MODELS = {"object": "list", "data": [{"id": "agent", "object": "model", "created": 0,
                                      "owned_by": "arthex"}]}  # fmt: skip


class _Models(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the client pools the connection

    def do_GET(self) -> None:
        body = json.dumps(MODELS).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_second_event_loop_gets_a_client_of_its_own(url: str) -> None:
    model = arthex.Model(
        name="agent", project="loops", inference_base_url=url, inference_api_key="k",
        report_metrics=[],
    )  # fmt: skip

    async def models() -> tuple[list[str], object]:
        client = model.openai_client()
        assert model.openai_client() is client  # cached within a loop
        listed = await client.models.list()
        return [m.id for m in listed.data], client

    first, first_client = asyncio.run(models())
    second, second_client = asyncio.run(models())
    assert first == second == ["agent"]
    assert second_client is not first_client

    async def close() -> None:
        await model.close()

    asyncio.run(close())  # the ended loop's client is left to it; this one has none to close


def test_the_ended_loops_client_is_closed_when_the_next_loop_replaces_it(url: str) -> None:
    """Closed at once, with its outcome retrieved, rather than left to a finaliser that would
    schedule the close on whichever loop runs at collection time ("Task exception was never
    retrieved ... Event loop is closed")."""
    model = arthex.Model(
        name="agent", project="loops", inference_base_url=url, inference_api_key="k",
        report_metrics=[],
    )  # fmt: skip

    async def models() -> object:
        client = model.openai_client()
        await client.models.list()  # a pooled keep-alive connection of this loop
        return client

    first = asyncio.run(models())
    unretrieved: list[object] = []

    async def second() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _l, c: unretrieved.append(c))
        await models()
        for _ in range(20):  # the retiring close runs as a task of this loop
            await asyncio.sleep(0)
        await model.close()

    asyncio.run(second())
    assert first.is_closed()  # type: ignore[attr-defined]
    assert unretrieved == []
