"""Listening sockets for arthex's servers (`arthex serve`, its ART protocol, `arthex view`)."""

from __future__ import annotations

import errno
import socket

from ..core.errors import InvalidInputError


def listen(host: str, port: int, what: str = "", option: str = "--port") -> socket.socket:
    """A listening TCP socket on (host, port), port 0 for a free one; a host that does not
    resolve or a port that cannot be had is one line (InvalidInputError), `what` naming the
    server it was for; a port in use names `option` with 0, which picks a free one."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise InvalidInputError(f"--host {host!r} cannot be resolved: {error}") from error
    family, _, _, _, address = infos[0]
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets that say so, and
    # without it every reused connection waits ~40 ms on Nagle and delayed ACKs.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(512)
    except OSError as error:
        sock.close()
        reason = error.strerror or str(error)
        purpose = f" for {what}" if what else ""
        hint = ""
        if error.errno == errno.EADDRINUSE and port:
            hint = f" (another process has it; {option} 0 picks a free port)"
        raise InvalidInputError(
            f"cannot listen on {host}:{port}{purpose}: {reason}{hint}"
        ) from error
    return sock
