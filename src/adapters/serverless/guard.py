"""The ASGI layer in front of every route: the API key first, then the body size cap.

It runs before routing, so no request reaches a route (or an unknown path) unauthenticated,
and a body is refused with 413 as soon as it is known to be too long: at once when its
Content-Length says so, otherwise while it streams in, never after buffering all of it. An
accepted body is spooled (memory up to a threshold, a temp file past it) and handed to the
route in the scope (see bodies.py), so the server holds it once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..inference.asgi import (
    ASGIApp,
    BodyTooLarge,
    Receive,
    Scope,
    Send,
    SpooledBody,
    header,
    read_body_spooled,
    replaying_spooled,
)
from ..inference.asgi import send_json as send_body
from ._wire import AUTHENTICATION_ERROR, HEADERS_TOO_LARGE, REQUEST_TOO_LARGE, error_body
from .bodies import BODY_SCOPE_KEY
from .keys import KeyRing

__all__ = ["TENANT_SCOPE_KEY", "ASGIApp", "Guard"]

TENANT_SCOPE_KEY = "arthex.tenant"


class Guard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        keys: KeyRing,
        max_body_bytes: int,
        max_headers: int = 100,
        spool_threshold_bytes: int = 1024 * 1024,
        spool_dir: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.app = app
        self.keys = keys
        self.max_body_bytes = max_body_bytes
        self.max_headers = max_headers
        self.spool_threshold_bytes = spool_threshold_bytes
        self.spool_dir = spool_dir

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        if len(scope.get("headers", ())) > self.max_headers:
            message = (
                f"the request has more headers than this server accepts ({self.max_headers}); "
                "send fewer"
            )
            await send_json(
                send,
                431,
                error_body(431, message, HEADERS_TOO_LARGE),
                [(b"connection", b"close")],
            )
            return
        tenant = self._tenant(scope)
        if tenant is None:
            message = "missing or wrong API key; send 'Authorization: Bearer <key>'"
            await send_json(
                send,
                401,
                error_body(401, message, AUTHENTICATION_ERROR),
                [(b"www-authenticate", b"Bearer")],
            )
            return
        scope[TENANT_SCOPE_KEY] = tenant
        body = SpooledBody(self.spool_threshold_bytes, self.spool_dir())
        try:
            try:
                complete = await read_body_spooled(scope, receive, self.max_body_bytes, body)
            except BodyTooLarge:
                await self._too_large(send)
                return
            if not complete:
                return
            scope[BODY_SCOPE_KEY] = body
            await self.app(scope, replaying_spooled(body, receive), send)
        finally:
            scope.pop(BODY_SCOPE_KEY, None)
            body.close()

    def _tenant(self, scope: Scope) -> str | None:
        value = header(scope, b"authorization")
        if value is None:
            return None
        scheme, _, token = value.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        return self.keys.tenant_for(token)

    async def _too_large(self, send: Send) -> None:
        message = (
            f"the request body is larger than this server accepts ({self.max_body_bytes} "
            "bytes); send fewer trajectory groups per request"
        )
        await send_json(
            send, 413, error_body(413, message, REQUEST_TOO_LARGE), [(b"connection", b"close")]
        )


async def send_json(
    send: Send,
    status: int,
    payload: dict[str, Any],
    extra_headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    await send_body(send, status, json.dumps(payload).encode(), extra_headers or ())
