"""Serve the viewer: bind, print the URL on one line, serve until SIGINT or SIGTERM.

Bound to a loopback address it needs no token (only this machine can reach it); bound to any
other address it always requires one, generated when none is given, and the printed URL
carries it.
"""

from __future__ import annotations

import ipaddress
import secrets
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from urllib.parse import quote

from ..listen import KEEP_ALIVE_S, listen


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_of(host: str, port: int, token: str | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    query = f"?token={quote(token, safe='')}" if token else ""
    return f"http://{shown}:{port}/{query}"


def serve(paths: Sequence[str], host: str, port: int, token: str | None) -> None:
    import uvicorn

    from .app import create_app

    if token is None and not is_loopback(host):
        token = secrets.token_urlsafe(24)
    app = create_app(paths, token)  # checks the paths before anything listens
    sock = listen(host, port, "the viewer")
    sock.set_inheritable(True)
    try:
        bound = sock.getsockname()[1]
        print(url_of(host, bound, token), flush=True)
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=1,
            timeout_keep_alive=KEEP_ALIVE_S,
            lifespan="off",
        )
        server = uvicorn.Server(config)

        def stop(_signal: int, _frame: FrameType | None) -> None:
            server.should_exit = True

        # uvicorn handles SIGINT and SIGTERM while it serves (stop accepting, finish what is
        # in flight within a second, return) and then raises the signal again for the
        # handler it found: this one, so a requested stop ends the command normally.
        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            server.run(sockets=[sock])
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    finally:
        sock.close()
    sys.stdout.flush()
