"""The servers' one listening-socket helper: a free port, and a taken one in one line."""

from __future__ import annotations

import socket

import pytest

from arthex.apps.listen import listen
from arthex.core.errors import InvalidInputError


def test_port_0_listens_on_a_free_port_that_accepts_a_connection() -> None:
    with listen("127.0.0.1", 0, "a test server") as sock:
        port = sock.getsockname()[1]
        assert port > 0 and sock.proto == socket.IPPROTO_TCP
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            conn, _ = sock.accept()
            conn.close()


def test_a_taken_port_is_one_line_naming_the_server_it_was_for() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(InvalidInputError) as refused:
            listen("127.0.0.1", port, "the ART API")
    message = str(refused.value)
    assert message.startswith(f"cannot listen on 127.0.0.1:{port} for the ART API: ")
    assert "\n" not in message
