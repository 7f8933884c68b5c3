"""Running an app of the server under uvicorn: the one place that configures it, for every
protocol (`arthex serve`'s own, ART's, Tinker's) and for the in-process Tinker emulator."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

from ...core.errors import InvalidInputError, MissingExtraError
from ..listen import listen
from .guard import ErrorShape
from .http_protocol import head_capped_protocol
from .limits import ServerLimits
from .observer import Observer

__all__ = ["serve_app", "uvicorn_server"]


async def serve_app(
    app: Observer,
    *,
    host: str,
    port: int,
    limits: ServerLimits | None,
    on_ready: Callable[[str], None] | None,
    log_level: str,
    what: str = "the training server",
    error_shape: ErrorShape | None = None,
) -> None:
    """Serve an app of the server (its Observer outermost) with uvicorn until SIGINT/SIGTERM
    (or cancellation): request heads capped, its lifespan run. `error_shape` spells a 431's
    body for another protocol."""
    server = uvicorn_server(app, limits=limits, log_level=log_level, error_shape=error_shape)
    sock = listen(host, port, what)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                await task
                raise InvalidInputError(f"{what} stopped while starting")
            await asyncio.sleep(0.01)
        if on_ready is not None:
            shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
            on_ready(f"http://{shown}:{sock.getsockname()[1]}")
        await task
    finally:
        sock.close()


def uvicorn_server(
    app: Observer,
    *,
    limits: ServerLimits | None,
    log_level: str,
    error_shape: ErrorShape | None = None,
    graceful_s: int = 10,
) -> Any:
    """The uvicorn Server for an app of the server: h11 with the request head capped (431 in
    the app's error shape), idle connections kept `limits.keep_alive_s`, no access log, the
    app's lifespan run."""
    try:
        import uvicorn
    except ImportError as exc:
        raise MissingExtraError("uvicorn", "server") from exc
    limits = limits if limits is not None else ServerLimits()
    config = uvicorn.Config(
        app,
        http=head_capped_protocol(limits.max_header_bytes, app.header_refused, error_shape),
        h11_max_incomplete_event_size=limits.max_header_bytes,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=graceful_s,
        timeout_keep_alive=limits.keep_alive_s,
    )
    return uvicorn.Server(config)
