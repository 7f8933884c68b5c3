"""The Tinker test files' shared emulator: the unmodified SDK's server on the tiny model; and
`arthex serve --protocol tinker` started as a real process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest

from tests._serverless import ready_line

REPO = Path(__file__).resolve().parents[1]

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


# --- `arthex serve --protocol tinker` as a real process ---------------------------------


@attrs.define
class TinkerServer:
    url: str
    state_dir: Path
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def audit(self) -> list[dict[str, Any]]:
        path = self.state_dir / "audit.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line]


def keys_file(folder: Path, keys: dict[str, str]) -> str:
    """A keys file of `tenant:key` lines."""
    path = folder / "keys.txt"
    path.write_text("".join(f"{tenant}:{key}\n" for tenant, key in keys.items()))
    return str(path)


def serve_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "arthex.apps.cli", "serve", "--protocol", "tinker", *args]


def server_environment() -> dict[str, str]:
    paths = [str(REPO), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
    }


def start_tinker_server(
    state_dir: Path,
    base_models: Sequence[str],
    keys: str,
    *,
    extra_args: Sequence[str] = (),
    timeout_s: float = 180.0,
) -> TinkerServer:
    """`arthex serve --protocol tinker` on a free loopback port, its state in `state_dir`
    (its audit log there too), one torch thread; returns once it listens."""
    state_dir.parent.mkdir(parents=True, exist_ok=True)
    log = state_dir.parent / f"tinker-server-{os.getpid()}-{time.monotonic_ns()}.log"
    models = [arg for model in base_models for arg in ("--base-model", model)]
    command = serve_command(
        *models, "--keys", keys, "--state-dir", str(state_dir), "--port", "0",
        "--log-level", "info", *extra_args,
    )  # fmt: skip
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            command, cwd=REPO, env=server_environment(), stdout=subprocess.PIPE, stderr=log_file
        )
    line = ready_line(process, log, timeout_s, "the Tinker server", "listening on ")
    url = line.split("listening on ", 1)[1].split()[0]
    return TinkerServer(url, state_dir, process, log)
