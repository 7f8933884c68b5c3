"""Running the training server as a real subprocess on loopback, for the serverless tests.

`start_server` launches `python -m arthex.apps.server` with a fresh keys file
and waits for its "listening on" line. `slow_backend` is a backend factory for `--backend
tests._serverless:slow_backend`: the in-memory backend with a pause after each gradient step
and, when the server's environment names a `Gate`, a hold between gradient steps for as long
as the gate is closed, so a test can act while a job is surely still running.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import attrs
import pytest

from arthex.core.config import TrainConfig
from arthex.core.identity import RunRef
from arthex.core.trajectories import TrajectoryGroup
from arthex.testing.fakes.backend import InMemoryBackend

REPO = Path(__file__).resolve().parents[1]
STEP_DELAY_ENV = "ARTHEX_TEST_STEP_DELAY"
STEP_GATE_ENV = "ARTHEX_TEST_STEP_GATE"
GATE_WAIT_S = 120.0  # a gate never reached or held this long is a failed test, not a wait


@attrs.define
class Gate:
    """A file a test and a training server share: while it exists (the gate is closed), every
    job of the server holds after each of its gradient steps, and says so in `held`."""

    path: Path

    @property
    def held(self) -> Path:
        return self.path.with_name(self.path.name + ".held")

    @property
    def env(self) -> dict[str, str]:
        return {STEP_GATE_ENV: str(self.path)}

    @contextmanager
    def closed(self) -> Iterator[Gate]:
        """Jobs hold between their steps inside the block, and go on after it."""
        self.held.unlink(missing_ok=True)
        self.path.touch()
        try:
            yield self
        finally:
            self.path.unlink(missing_ok=True)

    def wait_held(self) -> None:
        """Until a job holds at the gate (so it made a gradient step and is still running)."""
        deadline = time.monotonic() + GATE_WAIT_S
        while not self.held.exists():
            assert time.monotonic() < deadline, f"no job reached the gate in {GATE_WAIT_S} s"
            time.sleep(0.01)


class SlowInMemoryBackend(InMemoryBackend):
    def __init__(self, delay_s: float, gate: Path | None = None) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.gate = Gate(gate) if gate is not None else None

    async def train_steps(
        self, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        async for metrics in super().train_steps(run, groups, config):
            await asyncio.sleep(self.delay_s)
            yield metrics
            await self._hold()

    async def _hold(self) -> None:
        gate = self.gate
        if gate is None or not gate.path.exists():
            return
        gate.held.touch()
        deadline = time.monotonic() + GATE_WAIT_S
        while gate.path.exists() and time.monotonic() < deadline:  # noqa: ASYNC110 - a file
            await asyncio.sleep(0.01)  # polls the gate; the test opens it


def slow_backend() -> SlowInMemoryBackend:
    gate = os.environ.get(STEP_GATE_ENV)
    return SlowInMemoryBackend(
        float(os.environ.get(STEP_DELAY_ENV, "0.5")), Path(gate) if gate else None
    )


class FaultyCheckpointsBackend(InMemoryBackend):
    """Its checkpoint listing fails the way a full disk does: an error no route expects."""

    async def checkpoint_steps(self, run: RunRef) -> list[int]:
        raise OSError(28, "No space left on device")


def faulty_backend() -> FaultyCheckpointsBackend:
    return FaultyCheckpointsBackend()


def cispo_only_backend() -> InMemoryBackend:
    return InMemoryBackend(losses=("cispo",), sft=False)


@attrs.define
class ServerProcess:
    url: str
    state_dir: Path
    keys: dict[str, str]
    process: subprocess.Popen[bytes]
    log: Path
    gate: Gate  # holds the jobs of a slow_backend server while closed
    _unused: list[str] = attrs.field(factory=list)

    def fresh_tenant(self) -> tuple[str, str]:
        """(tenant, key) of a tenant no test has used yet: a clean slate on a shared server."""
        if not self._unused:
            raise RuntimeError("every tenant of this server has been used; start more tenants")
        tenant = self._unused.pop()
        return tenant, self.keys[tenant]

    def fresh_key(self) -> str:
        return self.fresh_tenant()[1]

    def stop(self, *, kill: bool = False) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def make_keys(count: int) -> dict[str, str]:
    return {f"tenant{i:03d}": f"key-{i:03d}-{secrets.token_urlsafe(18)}" for i in range(count)}


@attrs.define
class PendingServer:
    """A server process that is starting; `wait()` for its URL (do other work meanwhile)."""

    state_dir: Path
    keys: dict[str, str]
    process: subprocess.Popen[bytes]
    log: Path
    timeout_s: float
    gate: Gate

    def wait(self) -> ServerProcess:
        url = _await_ready(self.process, self.log, self.timeout_s)
        server = ServerProcess(
            url=url,
            state_dir=self.state_dir,
            keys=self.keys,
            process=self.process,
            log=self.log,
            gate=self.gate,
        )
        server._unused.extend(sorted(self.keys, reverse=True))
        return server


def launch_server(
    state_dir: Path,
    *,
    backend: str = "inmemory",
    keys: dict[str, str] | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
) -> PendingServer:
    keys = keys if keys is not None else make_keys(40)
    state_dir.parent.mkdir(parents=True, exist_ok=True)
    keys_file = state_dir.parent / f"keys-{secrets.token_hex(4)}.txt"
    keys_file.write_text("".join(f"{tenant}:{key}\n" for tenant, key in keys.items()))
    log = state_dir.parent / f"server-{secrets.token_hex(4)}.log"
    gate = Gate(state_dir.parent / f"gate-{secrets.token_hex(4)}")
    command = [
        sys.executable,
        "-m",
        "arthex.apps.server",
        "--backend",
        backend,
        "--port",
        "0",
        "--keys",
        str(keys_file),
        "--state-dir",
        str(state_dir),
        *extra_args,
    ]
    environment = {
        **os.environ,
        # the tests' package, then whatever this process imports arthex from
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **gate.env,
        **(env or {}),
    }
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            command, cwd=REPO, env=environment, stdout=subprocess.PIPE, stderr=log_file
        )
    return PendingServer(state_dir, keys, process, log, timeout_s, gate)


def local_tiny_server(factory: pytest.TempPathFactory, name: str) -> Iterator[ServerProcess]:
    """The body of a fixture (`yield from` it): `arthex serve --backend local` in a fresh
    state folder, the tiny model made while the server imports torch, stopped at the end."""
    pytest.importorskip("torch")
    from arthex.testing.tiny_model import tiny_model

    pending = launch_server(factory.mktemp(name) / "state", backend="local")
    tiny_model(factory.getbasetemp() / "tiny-model")
    server = pending.wait()
    try:
        yield server
    finally:
        server.stop()


def start_server(
    state_dir: Path,
    *,
    backend: str = "inmemory",
    keys: dict[str, str] | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> ServerProcess:
    return launch_server(
        state_dir, backend=backend, keys=keys, extra_args=extra_args, env=env
    ).wait()


def ready_line(
    process: subprocess.Popen[bytes], log: Path, timeout_s: float, what: str, *markers: str
) -> str:
    """The first line the server prints that holds every marker, within `timeout_s`; else
    the server is killed and RuntimeError shows the end of its log (`what` names it)."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    buffer = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.2)
        if ready:
            chunk = os.read(process.stdout.fileno(), 4096)
            if not chunk:
                break
            buffer += chunk
            for line in buffer.decode(errors="replace").splitlines():
                if all(marker in line for marker in markers):
                    return line
        elif process.poll() is not None:
            break
    process.kill()
    process.wait()
    raise RuntimeError(f"{what} did not start:\n{log.read_text()[-3000:]}")


def _await_ready(process: subprocess.Popen[bytes], log: Path, timeout_s: float) -> str:
    line = ready_line(process, log, timeout_s, "the training server", "listening on ")
    return line.split("listening on ", 1)[1].split()[0]


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under `directory` and its bytes: compare two to prove nothing changed. Left
    out: the audit log (every request, a refused one too, is meant to add a line to it) and
    the trainer leases (a client's register and close take and give back its lease)."""
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file() and not path.name.startswith(("audit.jsonl", "leases.json"))
    }


def directories(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_dir()}


async def statuses_around_an_idle_wait(
    url: str, path: str, idle_s: float, headers: Mapping[str, str] | None = None
) -> list[bytes]:
    """The status lines of GET `path` (with `headers`) sent twice on one kept-alive
    connection to `url` (http://host:port), `idle_s` apart. Async, so a server on the
    caller's own loop keeps running (and its idle timer firing) while the connection waits.
    ConnectionError if the server closed the connection in between."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode()
    statuses = []
    try:
        for wait in (0.0, idle_s):
            await asyncio.sleep(wait)
            writer.write(request)
            await writer.drain()
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as error:
                raise ConnectionError("the server closed the connection") from error
            statuses.append(head.split(b"\r\n", 1)[0])
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
    finally:
        writer.close()
    return statuses


class RawConnection:
    """One keep-alive HTTP/1.1 connection over a plain socket, for what httpx hides: whether
    the server kept the connection after an answer, and requests no client library would
    send (a header of 32 MiB, a Content-Length in other digits)."""

    def __init__(self, url: str, timeout: float = 60.0) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._buffer = b""

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send_head(self, method: str, path: str, headers: Mapping[str, str]) -> None:
        lines = [
            f"{method} {path} HTTP/1.1",
            "Host: arthex-test",
            *(f"{k}: {v}" for k, v in headers.items()),
        ]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("utf-8"))

    def request(
        self, method: str, path: str, headers: Mapping[str, str] | None = None, body: bytes = b""
    ) -> tuple[int, dict[str, str], bytes]:
        all_headers = {"Content-Length": str(len(body)), **(headers or {})}
        self.send_head(method, path, all_headers)
        self.sock.sendall(body)
        return self.read_response()

    def read_response(self) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of the next answer; the body by its Content-Length."""
        while b"\r\n\r\n" not in self._buffer:
            self._fill()
        head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(self._buffer) < length:
            self._fill()
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return int(status_line.split(" ", 2)[1]), headers, body

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self._buffer += chunk


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory so far (the kernel's VmHWM), in MiB."""
    return _status_kib(pid, "VmHWM") / 1024


def rss_mib(pid: int) -> float:
    return _status_kib(pid, "VmRSS") / 1024


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {field}")
