"""A free TCP port on loopback, as ART's `art.utils.network` finds one."""

from __future__ import annotations

import socket

__all__ = ["find_free_tcp_port"]


def find_free_tcp_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (another process may take it before
    it is bound again: bind and keep a socket where that matters)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
