"""Listening sockets for arthex's servers (`arthex serve`, its ART protocol, `arthex view`,
the Tinker OpenAI-compatible server)."""

from __future__ import annotations

import errno
import socket

from ..core.errors import InvalidInputError

KEEP_ALIVE_S = 75
"""Seconds arthex's HTTP servers keep an idle kept-alive connection open: longer than clients
keep theirs (httpx, under the OpenAI, tinker and ART clients: 5 s; aiohttp: 15 s). A server
that closes first races a client sending its next request on the closing connection, and
that request fails with no answer (ART's serverless client does not send a POST again)."""


def listen(
    host: str, port: int, what: str = "", option: str = "--port", *, backlog: int = 512
) -> socket.socket:
    """A listening TCP socket on (host, port), port 0 for a free one; a host that does not
    resolve or a port that cannot be had is one line (InvalidInputError), `what` naming the
    server it was for; a port in use names `option` with 0, which picks a free one (`option`
    without "--" names a Python argument, and then the host is `host`, not `--host`). A name
    with IPv4 and IPv6 addresses (e.g. "localhost") listens on its IPv4 one."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        flag = "--host" if option.startswith("--") else "host"
        raise InvalidInputError(f"{flag} {host!r} cannot be resolved: {error}") from error
    ipv4 = [info for info in infos if info[0] == socket.AF_INET]
    family, _, _, _, address = (ipv4 or infos)[0]
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets that say so, and
    # without it every reused connection waits ~40 ms on Nagle and delayed ACKs.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(backlog)
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
