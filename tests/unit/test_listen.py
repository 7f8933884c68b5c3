"""The servers' one listening-socket helper: a free port, and a taken one in one line."""

from __future__ import annotations

import socket
from typing import Any

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


def test_a_name_with_ipv6_and_ipv4_addresses_listens_on_the_ipv4_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resolved = socket.getaddrinfo  # "localhost" where the resolver lists ::1 first

    def ipv6_first(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        if host != "dual.test":
            return resolved(host, port, *args, **kwargs)
        tcp = socket.SOCK_STREAM, socket.IPPROTO_TCP, ""
        return [
            (socket.AF_INET6, *tcp, ("::1", port, 0, 0)),
            (socket.AF_INET, *tcp, ("127.0.0.1", port)),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", ipv6_first)
    with listen("dual.test", 0, "a test server") as sock:
        assert sock.family == socket.AF_INET and sock.getsockname()[0] == "127.0.0.1"


def test_a_python_argument_is_named_as_such_when_the_host_does_not_resolve() -> None:
    with pytest.raises(InvalidInputError, match=r"^host 'no-such-host\.invalid' cannot be"):
        listen("no-such-host.invalid", 0, "the Tinker server", "port")
