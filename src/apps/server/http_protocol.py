"""The training server's HTTP/1.1 protocol: uvicorn's h11 one, with the request head capped.

uvicorn's default parser (httptools) buffers a header of any size before the app sees the
request: a 32 MiB header without a key cost the server 64 MiB before its 401. h11 bounds
what it buffers for an incomplete request head (`max_incomplete_event_size`) and says so
with an error whose status hint is 431; uvicorn answers every parse error with a plain 400
and closes at once. This protocol answers that one case with 431 and a JSON body in the
API's error shape, then drains what the client is still sending (discarding it, for a few
seconds) before closing, so the client reads the answer instead of a connection reset.

The header count is the Guard's to check (it sees the parsed headers); the size is checked
here, before anything is parsed into memory.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, cast

from ...adapters.serverless.wire import HEADERS_TOO_LARGE, error_body

__all__ = ["DRAIN_S", "head_capped_protocol"]

DRAIN_S = 5.0  # how long a refused connection's incoming bytes are read and discarded


def head_capped_protocol(
    max_header_bytes: int,
    on_refused: Callable[[], None] = lambda: None,
    error_shape: Callable[[int, str, str], dict[str, Any]] | None = None,
) -> type[asyncio.Protocol]:
    """A protocol factory for `uvicorn.Config(http=...)`; `on_refused` is told of each 431
    (the request never reaches the app, so this is how it is counted). `error_shape` spells
    the 431's body for another protocol (status, message, kind -> JSON); OpenAI's by default."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    message = (
        f"the request line and headers are larger than this server accepts "
        f"({max_header_bytes} bytes); send smaller headers"
    )
    shaped = (
        error_shape(431, message, HEADERS_TOO_LARGE)
        if error_shape is not None
        else error_body(431, message, HEADERS_TOO_LARGE)
    )
    body = json.dumps(shaped).encode()
    answer = (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
        b"content-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n".encode()
        + b"connection: close\r\n\r\n"
        + body
    )

    class _Watched:
        """The h11 connection, noting whether its last error was the head-size one."""

        def __init__(self, conn: Any) -> None:
            self._conn = conn
            self.head_too_large = False

        def next_event(self) -> Any:
            try:
                return self._conn.next_event()
            except h11.RemoteProtocolError as exc:
                self.head_too_large = exc.error_status_hint == 431
                raise

        def __getattr__(self, name: str) -> Any:
            return getattr(self._conn, name)

    class HeadCappedH11Protocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._watched = _Watched(self.conn)
            self.conn = cast(Any, self._watched)
            self._draining = False

        def data_received(self, data: bytes) -> None:
            if self._draining:
                return  # refused: discard what the client is still sending
            super().data_received(data)

        def send_400_response(self, msg: str) -> None:
            if not self._watched.head_too_large:
                super().send_400_response(msg)
                return
            on_refused()
            self._draining = True
            self.transport.write(answer)
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(DRAIN_S, self.transport.close)

    return HeadCappedH11Protocol
