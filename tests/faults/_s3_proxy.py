"""A fault-injecting HTTP proxy on loopback in front of an S3 server (moto's).

Requests are forwarded byte for byte: the method, path and every header as sent (the
signature covers them), the body as read (by Content-Length, or its raw chunks), and the reply
streamed back with its status and headers. A rule can instead answer 503 SlowDown or 500,
reset the connection, add latency, or forward the request and then reset the connection, so
the write is done on the server but its reply is lost.
"""

from __future__ import annotations

import http.client
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Match = Callable[[str, str, dict[str, str]], bool]  # (method, path, lower-cased headers)

_ERRORS = {
    "slowdown": (503, "SlowDown", "Please reduce your request rate."),
    "error500": (500, "InternalError", "We encountered an internal error. Please try again."),
}


@dataclass
class Rule:
    kind: str  # "slowdown", "error500", "reset", "lost" (forward, then reset) or "delay"
    times: int | None  # how many matching requests it hits; None: all of them
    match: Match | None = None
    delay: float = 0.0
    hits: int = 0


@dataclass
class Faults:
    rules: list[Rule] = field(default_factory=list)
    log: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, fault)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(
        self, kind: str, times: int | None = 1, match: Match | None = None, delay: float = 0.0
    ) -> Rule:
        rule = Rule(kind, times, match, delay)
        with self.lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self.lock:
            self.rules.clear()

    def take(self, method: str, path: str, headers: dict[str, str]) -> Rule | None:
        with self.lock:
            for rule in self.rules:
                if rule.times is not None and rule.hits >= rule.times:
                    continue
                if rule.match is None or rule.match(method, path, headers):
                    rule.hits += 1
                    self.log.append((method, path, rule.kind))
                    return rule
            self.log.append((method, path, ""))
            return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_GET(self) -> None:
        self._handle()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def _handle(self) -> None:
        body = self._read_body()
        headers = {key.lower(): value for key, value in self.headers.items()}
        rule = self.server.faults.take(self.command, self.path, headers)
        if rule is not None and rule.kind == "delay":
            time.sleep(rule.delay)
            rule = None
        if rule is not None and rule.kind == "reset":
            self._reset()
            return
        if rule is not None and rule.kind in _ERRORS:
            self._error(*_ERRORS[rule.kind])
            return
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=30)
        try:
            upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for key, value in self.headers.items():
                upstream.putheader(key, value)
            upstream.endheaders(body if body else None)
            reply = upstream.getresponse()
            if rule is not None and rule.kind == "lost":
                reply.read()  # done on the server; the client never hears of it
                self._reset()
                return
            self._relay(reply)
        finally:
            upstream.close()

    def _read_body(self) -> bytes:
        """The body as sent: Content-Length bytes, or the raw chunks of a chunked body."""
        length = self.headers.get("Content-Length")
        if length is not None:
            return self.rfile.read(int(length))
        if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
            return b""
        raw = bytearray()
        while True:
            line = self.rfile.readline()
            raw += line
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, up to the blank line
                    trailer = self.rfile.readline()
                    raw += trailer
                    if trailer in (b"\r\n", b"\n", b""):
                        return bytes(raw)
            raw += self.rfile.read(size + 2)

    def _relay(self, reply: http.client.HTTPResponse) -> None:
        chunked = "chunked" in (reply.getheader("Transfer-Encoding") or "").lower()
        self.send_response_only(reply.status, reply.reason)
        for key, value in reply.getheaders():
            self.send_header(key, value)
        self.end_headers()
        while piece := reply.read1(64 * 1024) if not reply.isclosed() else b"":
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _error(self, status: int, code: str, message: str) -> None:
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{message}</Message><RequestId>fault</RequestId></Error>"
        ).encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def _reset(self) -> None:
        """Close with a TCP reset: the client sees the connection die, no reply."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: tuple[str, int], faults: Faults) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream
        self.faults = faults

    def handle_error(self, request: object, client_address: object) -> None:
        return  # a reset connection is the point, not a failure of the proxy


class FaultProxy:
    """The proxy, serving on a thread until `stop()`."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.faults = Faults()
        self.server = _ProxyServer((host, int(port)), self.faults)
        self.endpoint = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
