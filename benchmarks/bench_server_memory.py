"""The training server's memory under hostile requests: RSS before and after each, and the peak.

    python -m benchmarks server_memory [--cap-mib 64]

Each scenario gets a fresh `arthex serve --backend inmemory` process, so its peak RSS
(`VmHWM` in /proc/PID/status, the kernel's own high-water mark, not a sampled guess) belongs
to that one request:

- a 200 MB body streamed with chunked encoding (no Content-Length) under a valid key: the
  server must refuse it at the body cap while it streams;
- a 32 MiB header without a key: the server must refuse it at the header cap, before
  authentication, without buffering it;
- a body just under the body cap that is not JSON: the server reads it whole and refuses it
  at the first byte of parsing (400): what holding one accepted body costs;
- a JSON body just under the body cap (a training job for a model that does not exist,
  padded with one long string), which the server reads and parses whole before answering
  404: the body plus its parsed value (the parser's own copy of a long string included).

The table prints RSS before, after, the peak, and the peak's growth over "before" as a
multiple of the body cap. Linux only (it reads /proc).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import select
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ._table import print_table

MIB = 1024 * 1024
KEY = "bench-" + secrets.token_urlsafe(18)


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {field}")


class Server:
    def __init__(self, state: Path, cap: int) -> None:
        command = [
            sys.executable, "-m", "arthex.apps.server", "--backend", "inmemory",
            "--port", "0", "--state-dir", str(state), "--max-body-bytes", str(cap),
        ]  # fmt: skip
        env = {**os.environ, "ARTHEX_SERVER_KEYS": f"bench:{KEY}"}
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode()
        if "listening on " not in line:
            self.process.kill()
            raise RuntimeError(f"the server did not start: {line!r}")
        url = line.split("listening on ", 1)[1].split()[0]
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.address = (host, int(port))

    def rss_mib(self) -> float:
        return _status_kib(self.process.pid, "VmRSS") / 1024

    def peak_mib(self) -> float:
        return _status_kib(self.process.pid, "VmHWM") / 1024

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def _exchange(address: tuple[str, int], send: Callable[[socket.socket], None]) -> int:
    """Run `send` on a fresh connection (it may be cut off by an early answer), then read the
    status line of the answer."""
    with socket.create_connection(address, timeout=120) as sock:
        try:
            send(sock)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = b""
        try:
            while b"\r\n" not in answer:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except ConnectionResetError:
            pass
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def _answered(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def streamed_body(total: int) -> Callable[[socket.socket], None]:
    def send(sock: socket.socket) -> None:
        sock.sendall(
            b"POST /preview/training-jobs HTTP/1.1\r\nHost: bench\r\n"
            + f"Authorization: Bearer {KEY}\r\n".encode()
            + b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"%x\r\n" % MIB + b"x" * MIB + b"\r\n"
        for _ in range(total // MIB):
            if _answered(sock):
                return  # refused mid-stream, as it should be
            sock.sendall(chunk)
        sock.sendall(b"0\r\n\r\n")

    return send


def huge_header(size: int) -> Callable[[socket.socket], None]:
    def send(sock: socket.socket) -> None:
        sock.sendall(b"GET /preview/models HTTP/1.1\r\nHost: bench\r\nX-Pad: ")
        for _ in range(size // MIB):
            if _answered(sock):
                return
            sock.sendall(b"a" * MIB)
        sock.sendall(b"\r\n\r\n")

    return send


def body_under_cap(cap: int, *, valid: bool) -> Callable[[socket.socket], None]:
    frame = {"model_id": "m" + "0" * 24, "trajectory_groups": [], "pad": ""}
    pad = cap - len(json.dumps(frame)) - 1024
    body = json.dumps({**frame, "pad": "x" * pad}).encode()
    if not valid:
        body = b"<" + body[1:]

    def send(sock: socket.socket) -> None:
        sock.sendall(
            b"POST /preview/training-jobs HTTP/1.1\r\nHost: bench\r\n"
            + f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n".encode()
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        )
        sock.sendall(body)

    return send


def run(cap: int) -> list[list[object]]:
    scenarios = [
        ("200 MB streamed body, valid key", streamed_body(200 * 1000 * 1000)),
        ("32 MiB header, no key", huge_header(32 * MIB)),
        (f"{cap // MIB} MiB body, not JSON (cap - 1 KiB)", body_under_cap(cap, valid=False)),
        (f"{cap // MIB} MiB JSON body (cap - 1 KiB)", body_under_cap(cap, valid=True)),
    ]
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for index, (name, send) in enumerate(scenarios):
            server = Server(Path(tmp) / f"state-{index}", cap)
            try:
                # Warm up the request path, so "before" includes what every request imports.
                _exchange(server.address, huge_header(0))
                time.sleep(0.2)
                before, base_peak = server.rss_mib(), server.peak_mib()
                status = _exchange(server.address, send)
                time.sleep(0.5)
                after, peak = server.rss_mib(), server.peak_mib()
            finally:
                server.stop()
            growth = max(peak, base_peak) - before
            rows.append([name, status, before, after, peak, growth, f"{growth * MIB / cap:.2f}x"])
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks server_memory")
    parser.add_argument("--cap-mib", type=int, default=64, help="the server's body cap")
    args = parser.parse_args(argv if argv is not None else [])
    rows = run(args.cap_mib * MIB)
    print_table(
        f"Training server memory (MiB), body cap {args.cap_mib} MiB",
        ["request", "status", "RSS before", "RSS after", "peak RSS", "peak growth", "of cap"],
        rows,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
