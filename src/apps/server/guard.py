"""The ASGI layer in front of every route: the header count, the API key, the key's rate
limit (429 with Retry-After), then the body size cap.

It runs before routing, so no request reaches a route (or an unknown path) unauthenticated,
and a body is refused with 413 as soon as it is known to be too long: at once when its
Content-Length says so, otherwise while it streams in, never after buffering all of it. An
accepted body is spooled (memory up to a threshold, a temp file past it) and handed to the
route in the scope (see bodies.py), so the server holds it once.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ...adapters.files import disk_full, is_disk_full
from ...adapters.inference.asgi import (
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
from ...adapters.inference.asgi import send_json as send_body
from ...adapters.serverless.wire import (
    AUTHENTICATION_ERROR,
    HEADERS_TOO_LARGE,
    RATE_LIMITED,
    REQUEST_TOO_LARGE,
    STORAGE_EXCEEDED,
    error_body,
)
from .bodies import BODY_SCOPE_KEY
from .limits import ServerLimits
from .ratelimit import TokenBuckets

logger = logging.getLogger("arthex")

__all__ = [
    "AUDIT_SCOPE_KEY",
    "OPEN_TENANT",
    "TENANT_SCOPE_KEY",
    "ASGIApp",
    "ErrorShape",
    "Guard",
    "KeyCheck",
    "identify",
    "send_json",
    "send_unauthorized",
]

TENANT_SCOPE_KEY = "arthex.tenant"
AUDIT_SCOPE_KEY = "arthex.audit"  # what a handler tells the audit log (model and job ids)


ErrorShape = Callable[[int, str, str], dict[str, Any]]
"""(status, message, kind) -> the JSON body of an error: OpenAI's shape by default."""

OPEN_TENANT = "open"  # who every request is on a Guard without keys


class KeyCheck(Protocol):
    """Who a presented key speaks for: (tenant, a digest naming the key), or None. KeyRing is
    one; a loopback test server may accept any key of a shape."""

    def identify(self, presented: str) -> tuple[str, bytes] | None: ...


Credential = Callable[[Scope], "str | None"]
"""Where a protocol's clients put their key (`Authorization: Bearer` by default)."""


def _openai_shape(status: int, message: str, kind: str) -> dict[str, Any]:
    return error_body(status, message, kind)


class Guard:
    """Header count, then the API key, then the key's rate limit, then the body cap.

    `keys` None opens the API (every request is OPEN_TENANT, rate-limited as one key): for a
    protocol that carries no credentials, served on loopback. `error_shape` spells the
    refusals' bodies for another protocol (ART's `{"detail": ...}`); `credential` reads the
    key where that protocol's clients send it, and `key_hint` tells a refused client so."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        keys: KeyCheck | None,
        limits: ServerLimits,
        spool_dir: Callable[[], str | None] = lambda: None,
        on_rate_limited: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        error_shape: ErrorShape = _openai_shape,
        credential: Credential | None = None,
        key_hint: str = "Authorization: Bearer <key>",
    ) -> None:
        self.app = app
        self.keys = keys
        self.error_shape = error_shape
        self.credential = credential if credential is not None else bearer_token
        self.key_hint = key_hint
        self.limits = limits
        self.spool_dir = spool_dir
        self.on_rate_limited = on_rate_limited
        self.buckets = TokenBuckets(limits.rate_per_s, limits.rate_burst, clock)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        refusal = self._head_refusal(scope)
        if refusal is not None:
            await self._refuse(send, 431, refusal, HEADERS_TOO_LARGE)
            return
        identity = (
            identify(scope, self.keys, self.credential)
            if self.keys is not None
            else (OPEN_TENANT, b"")
        )
        if identity is None:
            await send_unauthorized(send, "API key", "<key>", self.error_shape, self.key_hint)
            return
        tenant, key_digest = identity
        scope[TENANT_SCOPE_KEY] = tenant
        wait = self.buckets.take(key_digest)
        if wait > 0:
            await self._rate_limited(send, wait)
            return
        body = SpooledBody(self.limits.spool_threshold_bytes, self.spool_dir())
        try:
            try:
                complete = await read_body_spooled(scope, receive, self.limits.max_body_bytes, body)
            except BodyTooLarge:
                await self._too_large(send)
                return
            except OSError as exc:  # the spool's disk: the request cannot be held
                if not is_disk_full(exc):
                    raise
                await self._no_room(send, scope, body.size)
                return
            if not complete:
                return
            scope[BODY_SCOPE_KEY] = body
            await self.app(scope, replaying_spooled(body, receive), send)
        finally:
            scope.pop(BODY_SCOPE_KEY, None)
            body.close()

    def _head_refusal(self, scope: Scope) -> str | None:
        """Why the request head is refused, if it is. The protocol refuses a head that grows
        past the cap while it arrives; one that arrived whole in a single read is measured
        here, as it was sent (request line, `name: value` lines, line ends)."""
        headers = scope.get("headers", ())
        if len(headers) > self.limits.max_headers:
            return (
                f"the request has more headers than this server accepts "
                f"({self.limits.max_headers}); send fewer"
            )
        target = len(scope.get("raw_path", b"")) + len(scope.get("query_string", b"")) + 1
        size = len(str(scope.get("method", ""))) + target + 12
        size += sum(len(name) + len(value) + 4 for name, value in headers) + 2
        if size > self.limits.max_header_bytes:
            return (
                f"the request line and headers are larger than this server accepts "
                f"({self.limits.max_header_bytes} bytes); send smaller headers"
            )
        return None

    async def _rate_limited(self, send: Send, wait: float) -> None:
        self.on_rate_limited()
        message = (
            f"this API key sent more than {self.limits.rate_per_s:g} requests a second (bursts "
            f"of {self.limits.rate_burst}); retry after the Retry-After header's seconds"
        )
        retry_after = TokenBuckets.retry_after(wait).encode()
        await send_json(
            send,
            429,
            self.error_shape(429, message, RATE_LIMITED),
            [(b"retry-after", retry_after)],
        )

    async def _no_room(self, send: Send, scope: Scope, received: int) -> None:
        declared = header(scope, b"content-length")
        needed = int(declared) if declared is not None and declared.isdigit() else received + 1
        spool = self.spool_dir()
        where = Path(spool) if spool is not None else Path(tempfile.gettempdir())
        logger.error("%s", disk_full(where, needed))  # the server's paths stay in its log
        message = (
            f"the server has no disk space left to hold this {needed}-byte request; retry "
            "later (its operator was told what to free)"
        )
        await self._refuse(send, 507, message, STORAGE_EXCEEDED)

    async def _too_large(self, send: Send) -> None:
        message = (
            f"the request body is larger than this server accepts ({self.limits.max_body_bytes} "
            "bytes); send fewer trajectory groups per request"
        )
        await self._refuse(send, 413, message, REQUEST_TOO_LARGE)

    async def _refuse(self, send: Send, status: int, message: str, code: str) -> None:
        """An error that closes the connection: what is left of the request is never read,
        so the connection cannot carry another one."""
        await send_json(
            send, status, self.error_shape(status, message, code), [(b"connection", b"close")]
        )


def identify(
    scope: Scope, keys: KeyCheck | None, credential: Credential | None = None
) -> tuple[str, bytes] | None:
    """(name, key digest) of the request's key (its bearer token unless `credential` reads
    it elsewhere) in `keys`, or None."""
    token = (credential or bearer_token)(scope)
    return keys.identify(token) if token is not None and keys is not None else None


async def send_unauthorized(
    send: Send,
    what: str,
    placeholder: str,
    error_shape: ErrorShape = _openai_shape,
    hint: str | None = None,
) -> None:
    sent = hint if hint is not None else f"Authorization: Bearer {placeholder}"
    message = f"missing or wrong {what}; send '{sent}'"
    await send_json(
        send,
        401,
        error_shape(401, message, AUTHENTICATION_ERROR),
        [(b"www-authenticate", b"Bearer")],
    )


def bearer_token(scope: Scope) -> str | None:
    value = header(scope, b"authorization")
    if value is None:
        return None
    scheme, _, token = value.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


async def send_json(
    send: Send,
    status: int,
    payload: dict[str, Any],
    extra_headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    await send_body(send, status, json.dumps(payload).encode(), extra_headers or ())
