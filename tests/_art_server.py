"""`arthex serve --protocol art` as a real process on loopback, for the tests that drive it
(the fast wire tests, the NAT interop suite), and the recorded requests of ART 0.5.17's
client through NAT 1.9.0's RemoteBackend (tests/unit/data/art_protocol/, recorded by
tests/interop/nat/record_wire.py)."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from arthex.adapters.local.backend import LocalBackend
from arthex.core.config import TrainConfig
from arthex.core.identity import RunRef
from arthex.core.trajectories import TrajectoryGroup
from tests._serverless import ready_line

REPO = Path(__file__).resolve().parents[1]
RECORDED = REPO / "tests" / "unit" / "data" / "art_protocol" / "nat-1.9.0-requests.json"
RECORDED_BASE_MODEL = "tiny-model"  # the recording's base_model, replaced by a real path


PAUSE_DIR_ENV = "ARTHEX_TEST_ART_PAUSE_DIR"


def torch_backend() -> LocalBackend:
    """`--backend tests._art_server:torch_backend`: LocalBackend sampling with torch."""
    return LocalBackend(engine="torch")


class PausableBackend(LocalBackend):
    """LocalBackend(engine="torch") whose update waits while `$ARTHEX_TEST_ART_PAUSE_DIR/pause`
    exists, after touching `paused` there: a test can hold an update in flight (to kill the
    server mid-job) and know when it is."""

    async def train_steps(
        self, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        folder = Path(os.environ[PAUSE_DIR_ENV])
        if (folder / "pause").exists():
            (folder / "paused").touch()
            while (folder / "pause").exists():  # noqa: ASYNC110 (another process removes it)
                await asyncio.sleep(0.05)
        async for metrics in super().train_steps(run, groups, config):
            yield metrics


TINKER_URL_ENV = "ARTHEX_TEST_TINKER_URL"
TINKER_KEY = "tml-art-protocol"


def tinker_backend() -> Any:
    """`--backend tests._art_server:tinker_backend`: TinkerBackend against the emulator at
    `$ARTHEX_TEST_TINKER_URL` (key TINKER_KEY)."""
    from arthex.adapters.tinker import TinkerBackend

    return TinkerBackend(base_url=os.environ[TINKER_URL_ENV], api_key=TINKER_KEY, timeout_s=120)


def pausable_backend() -> PausableBackend:
    """`--backend tests._art_server:pausable_backend` (set ARTHEX_TEST_ART_PAUSE_DIR)."""
    return PausableBackend(engine="torch")


def recorded_requests(base_model: str) -> list[dict[str, Any]]:
    """The recorded requests, in order, with the tiny model as their base_model."""
    requests: list[dict[str, Any]] = json.loads(RECORDED.read_text())["requests"]
    out = []
    for request in copy.deepcopy(requests):
        body = request.get("body")
        if isinstance(body, dict):
            for model in (body, body.get("model")):
                if isinstance(model, dict) and model.get("base_model") == RECORDED_BASE_MODEL:
                    model["base_model"] = base_model
        out.append(request)
    return out


@attrs.define
class ArtServer:
    api_url: str
    inference_url: str
    base_path: Path
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self, *, kill: bool = False) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def start_art_server(
    base_path: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    inference_port: int = 0,
    backend: str = "tests._art_server:torch_backend",
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout_s: float = 180.0,
) -> ArtServer:
    base_path.parent.mkdir(parents=True, exist_ok=True)
    log = base_path.parent / f"art-server-{os.getpid()}-{time.monotonic_ns()}.log"
    command = [
        sys.executable, "-m", "arthex.apps.cli", "serve", "--protocol", "art",
        "--host", host, "--port", str(port), "--inference-port", str(inference_port),
        "--backend", backend, "--base-path", str(base_path), "--log-level", "info",
        *extra_args,
    ]  # fmt: skip
    paths = [str(REPO), os.environ.get("PYTHONPATH", "")]
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        **(env or {}),
    }
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            command, cwd=REPO, env=environment, stdout=subprocess.PIPE, stderr=log_file
        )
    api_url, inference_url = _await_ready(process, log, timeout_s)
    return ArtServer(api_url, inference_url, base_path, process, log)


def _await_ready(process: subprocess.Popen[bytes], log: Path, timeout_s: float) -> tuple[str, str]:
    markers = ("listening on ", "inference on ")
    line = ready_line(process, log, timeout_s, "the ART server", *markers)
    api = line.split("listening on ", 1)[1].split()[0]
    return api, line.split("inference on ", 1)[1].split(",")[0]
