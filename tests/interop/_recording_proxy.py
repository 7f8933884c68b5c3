"""A reverse proxy on loopback that records every request it forwards: method, path, query,
JSON body, whether the key went as a bearer token, and the upstream's status. Clients pointed
at it cannot tell it from the server, so two clients' requests can be compared as sent."""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

# Hop-by-hop headers (RFC 9110 7.6.1) and the two the proxy sets itself.
_NOT_FORWARDED = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "host", "content-length"}
)


@attrs.frozen
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any  # the parsed JSON body, None when there is none
    bearer: str | None  # the token of an `Authorization: Bearer ...` header
    status: int


@attrs.define
class RecordingProxy:
    url: str
    requests: list[Recorded]


@contextmanager
def recording_proxy(upstream: str) -> Iterator[RecordingProxy]:
    """A proxy in front of `upstream` (`http://host:port`), serving on a thread until exit."""
    target = urllib.parse.urlsplit(upstream)
    recorded: list[Recorded] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the clients expect

        def forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _NOT_FORWARDED}
            connection = http.client.HTTPConnection(target.hostname or "", target.port, timeout=600)
            try:
                connection.request(self.command, self.path, body=body or None, headers=headers)
                answer = connection.getresponse()
                content = answer.read()
                answer_headers = [
                    (k, v) for k, v in answer.getheaders() if k.lower() not in _NOT_FORWARDED
                ]
            finally:
                connection.close()
            split = urllib.parse.urlsplit(self.path)
            auth = self.headers.get("Authorization") or ""
            with lock:
                recorded.append(
                    Recorded(
                        method=self.command,
                        path=split.path,
                        query=urllib.parse.parse_qs(split.query, keep_blank_values=True),
                        body=json.loads(body) if body else None,
                        bearer=auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None,
                        status=answer.status,
                    )
                )
            self.send_response(answer.status)
            for key, value in answer_headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        do_GET = do_POST = do_PUT = do_DELETE = forward

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the recording is the log

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="recording-proxy", daemon=True)
    thread.start()
    try:
        yield RecordingProxy(f"http://127.0.0.1:{server.server_address[1]}", recorded)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
