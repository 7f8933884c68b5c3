"""The Tinker test files' shared emulator: the unmodified SDK's server on the tiny model,
in-process (`running_emulator`) or as a process of its own (`server_process`, for tests that
kill it)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import pytest

if TYPE_CHECKING:
    from arthex.emulators.tinker import TinkerEmulator


def running_emulator(
    tiny: str, key: str, factory: pytest.TempPathFactory
) -> Iterator[TinkerEmulator]:
    """The emulator on `tiny` answering `key`, its state in a new folder, the SDK's telemetry
    off while it runs, one torch thread (the tests share two cores); stopped at the end."""
    from arthex.emulators.tinker import TinkerEmulator

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TINKER_TELEMETRY", "0")
        state = factory.mktemp("tinker-state")
        with TinkerEmulator(tiny, api_key=key, state_dir=str(state), torch_threads=1) as running:
            yield running


# --- the server as a process of its own ----------------------------------------------------

SERVER_START_S = 180.0  # loading torch and the model on a busy shared machine


def server_command(base_model: str, *, port: int, state_dir: Path, key: str) -> list[str]:
    """The command that serves the Tinker protocol on loopback: the one place that names it."""
    return [
        sys.executable, "-m", "arthex.emulators.tinker", "--base-model", base_model,
        "--port", str(port), "--state-dir", str(state_dir), "--api-key", key, "--threads", "1",
    ]  # fmt: skip


@attrs.define
class ServerProcess:
    """A Tinker server process on loopback; `kill` is a SIGKILL, nothing of it runs after."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=60)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@contextmanager
def server_process(
    base_model: str,
    *,
    port: int,
    state_dir: Path,
    key: str,
    log: Path,
    env: Mapping[str, str] | None = None,
) -> Iterator[ServerProcess]:
    """Start the server, wait until it answers `healthz`, and kill it at the end if it still
    runs."""
    environment = {**os.environ, "TINKER_TELEMETRY": "0", "OMP_NUM_THREADS": "1", **(env or {})}
    command = server_command(base_model, port=port, state_dir=state_dir, key=key)
    with log.open("ab") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=environment)
    running = ServerProcess(process, f"http://127.0.0.1:{port}", log)
    try:
        deadline = time.monotonic() + SERVER_START_S
        while not _healthy(running.url, key):
            if process.poll() is not None:
                raise AssertionError(f"the Tinker server exited: {running.output()}")
            assert time.monotonic() < deadline, f"no Tinker server: {running.output()}"
            time.sleep(0.2)
        yield running
    finally:
        if process.poll() is None:
            running.kill()


def _healthy(url: str, key: str) -> bool:
    request = urllib.request.Request(f"{url}/api/v1/healthz", headers={"X-API-Key": key})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
