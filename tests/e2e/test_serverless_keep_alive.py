"""An idle kept-alive connection to `arthex serve` outlives the clients' own keep-alive, so a
client reusing it never meets a connection the server is closing; `--keep-alive` sets how long.

Before, the server closed an idle connection after uvicorn's default 5 s: the same 5 s for which
httpx (under the OpenAI, tinker and ART clients) keeps reusing one. On a loaded machine, ART's
own PipelineTrainer on ART's ServerlessBackend sent its POST /preview/training-jobs on a
connection the server was closing and got no answer (openai.APIConnectionError; ART's client
does not send a POST again), and its run stopped.
"""

from __future__ import annotations

import asyncio
import select
import time
from pathlib import Path

import pytest

from tests._serverless import RawConnection, start_server, statuses_around_an_idle_wait

pytestmark = pytest.mark.e2e


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_an_idle_connection_stays_open_past_the_openai_clients_own_keep_alive(
    tmp_path: Path,
) -> None:
    from openai._constants import DEFAULT_CONNECTION_LIMITS

    expiry = DEFAULT_CONNECTION_LIMITS.keepalive_expiry  # how long the client reuses one
    assert expiry is not None
    server = start_server(tmp_path / "state")
    try:
        key = server.fresh_key()
        # still open after the wait: the request the client sends on it is answered
        statuses = asyncio.run(
            statuses_around_an_idle_wait(server.url, "/preview/models", expiry + 1.0, auth(key))
        )
        assert statuses == [b"HTTP/1.1 200 OK"] * 2
    finally:
        server.stop()


def test_keep_alive_sets_when_the_server_closes_an_idle_connection(tmp_path: Path) -> None:
    server = start_server(tmp_path / "state", extra_args=["--keep-alive", "1"])
    try:
        key = server.fresh_key()
        with RawConnection(server.url) as conn:
            status, _, _ = conn.request("GET", "/preview/models", auth(key))
            answered = time.monotonic()
            assert status == 200
            # the server closes it by itself: the socket reads its end (b"") within the bound
            readable, _, _ = select.select([conn.sock], [], [], 60.0)
            assert readable, "the server kept an idle connection open past --keep-alive 1"
            assert conn.sock.recv(1) == b""
            assert time.monotonic() - answered >= 0.9  # not before the second is up
    finally:
        server.stop()
