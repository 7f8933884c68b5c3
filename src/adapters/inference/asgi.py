"""ASGI plumbing shared by the servers (the inference server and the training server): the
types, headers, JSON replies, and a request body read whole under a size cap (in memory, or
spooled to a temp file past a threshold)."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_DIGITS = re.compile(r"[0-9]{1,18}")  # not str.isdigit(): it accepts '²', which int() refuses


class BodyTooLarge(Exception):
    """The request declares or sends more bytes than the cap."""


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if bytes(key).lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None when the client disconnected first. Raises
    BodyTooLarge as soon as the declared length or the bytes received pass `limit`, so an
    oversized body is refused while it streams, not after it has been buffered."""
    _check_declared(scope, limit)
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > limit:
            raise BodyTooLarge
        if not message.get("more_body", False):
            return bytes(body)


def _check_declared(scope: Scope, limit: int) -> None:
    """BodyTooLarge when Content-Length passes `limit` (or is not a number in ASCII digits)."""
    declared = header(scope, b"content-length")
    if declared is not None and (_DIGITS.fullmatch(declared) is None or int(declared) > limit):
        raise BodyTooLarge


class SpooledBody:
    """A request body held once: in memory up to `threshold` bytes, in a temp file in
    `directory` past it. `read()` returns it as one buffer, read straight from the file, so
    the process never holds the body twice (the bytes received, and a copy to parse)."""

    def __init__(self, threshold: int, directory: str | None = None) -> None:
        # closed by close(), which the Guard calls when the request ends
        self._file = tempfile.SpooledTemporaryFile(max_size=threshold, dir=directory)  # noqa: SIM115
        self.size = 0

    def write(self, chunk: bytes) -> None:
        self._file.write(chunk)
        self.size += len(chunk)

    def read(self) -> bytes:
        """The whole body as one bytes object (bytes, not bytearray: a parser copies a
        mutable buffer before it parses it)."""
        self._file.seek(0)
        return bytes(self._file.read())

    def read_at(self, offset: int, size: int) -> bytes:
        self._file.seek(offset)
        return bytes(self._file.read(size))

    def close(self) -> None:
        self._file.close()


async def read_body_spooled(scope: Scope, receive: Receive, limit: int, body: SpooledBody) -> bool:
    """Read the request body into `body` (False when the client disconnected first). Raises
    BodyTooLarge as `read_body` does: on the declared length, or as soon as the bytes
    received pass `limit`."""
    _check_declared(scope, limit)
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return False
        chunk = message.get("body", b"")
        if body.size + len(chunk) > limit:
            raise BodyTooLarge
        body.write(chunk)
        if not message.get("more_body", False):
            return True


def replaying_spooled(body: SpooledBody, receive: Receive, piece: int = 64 * 1024) -> Receive:
    """A `receive` that hands the app the spooled body in pieces, then the real channel."""
    offset = 0
    delivered = False

    async def replay() -> Message:
        nonlocal offset, delivered
        if delivered:
            return await receive()
        chunk = body.read_at(offset, piece)
        offset += len(chunk)
        delivered = offset >= body.size
        return {"type": "http.request", "body": chunk, "more_body": not delivered}

    return replay


def replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the app the body already read, then the real channel (whose
    next message is the disconnect, as ASGI says)."""
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if delivered:
            return await receive()
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def send_json(
    send: Send, status: int, body: bytes, extra_headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """Send an already-encoded JSON body with its status."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *extra_headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
