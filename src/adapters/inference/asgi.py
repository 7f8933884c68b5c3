"""ASGI plumbing shared by the servers (the inference server and the training server): the
types, headers, JSON replies, and a request body read whole under a size cap."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


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
    declared = header(scope, b"content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise BodyTooLarge
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
