"""The Tinker test files' shared servers: the unmodified SDK's server on the tiny model,
in-process (`running_emulator`) or as a process of its own (`server_process`, for tests that
kill it); and `arthex serve --protocol tinker` with keys and tenants (`start_tinker_server`)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest

from tests._serverless import ready_line

REPO = Path(__file__).resolve().parents[1]

if TYPE_CHECKING:
    from arthex.core.trajectories import TrajectoryGroup
    from arthex.emulators.tinker import TinkerEmulator


def running_emulator(
    tiny: str, key: str | None, factory: pytest.TempPathFactory
) -> Iterator[TinkerEmulator]:
    """The emulator on `tiny` answering `key` (None: any key of the SDK's shape), its state in
    a new folder, the SDK's telemetry off while it runs, one torch thread (the tests share two
    cores); stopped at the end."""
    from arthex.emulators.tinker import TinkerEmulator

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TINKER_TELEMETRY", "0")
        state = factory.mktemp("tinker-state")
        with TinkerEmulator(tiny, api_key=key, state_dir=str(state), torch_threads=1) as running:
            yield running


def sampler_paths(
    base_url: str, key: str, base_model: str, timeout_s: float = 120.0
) -> dict[str, str]:
    """Sampler weights saved through the Tinker SDK: `before` (a fresh LoRA: the base model's
    weights) and `after` one cross-entropy step at a high learning rate; their paths."""
    import tinker
    from tinker import types

    service = tinker.ServiceClient(base_url=base_url, api_key=key)
    try:
        made = service.create_lora_training_client(base_model=base_model, rank=8)
        trainer = made.result(timeout_s)
        before = trainer.save_weights_for_sampler("before").result(timeout_s).path
        tokens = [5, 17, 42, 8, 99, 3, 64, 12]
        n = len(tokens) - 1
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(tokens[:-1]),
            loss_fn_inputs={
                "target_tokens": types.TensorData(data=tokens[1:], dtype="int64", shape=[n]),
                "weights": types.TensorData(data=[1.0] * n, dtype="float32", shape=[n]),
            },
        )
        trainer.forward_backward([datum], "cross_entropy").result(timeout_s)
        trainer.optim_step(types.AdamParams(learning_rate=5e-2)).result(timeout_s)
        after = trainer.save_weights_for_sampler("after").result(timeout_s).path
        return {"before": before, "after": after}
    finally:
        service.close("success").result(timeout_s)


# --- the server as a process of its own ----------------------------------------------------

SERVER_START_S = 180.0  # loading torch and the model on a busy shared machine


def server_command(base_model: str, *, port: int, state_dir: Path, key: str) -> list[str]:
    """`arthex serve --protocol tinker` on loopback with one tenant whose key is `key` (its
    keys file beside the state dir): the one place that names the command."""
    state_dir.parent.mkdir(parents=True, exist_ok=True)
    keys = keys_file(state_dir.parent, {"tenant-a": key})
    return serve_command(
        "--base-model", base_model, "--port", str(port), "--state-dir", str(state_dir),
        "--keys", keys, "--audit-log", "off",
    )  # fmt: skip


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
    environment = {**server_environment(), "TINKER_TELEMETRY": "0", **(env or {})}
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


PREFERENCE_PROMPT = [1, 12, 13]
PREFERENCE_GOOD, PREFERENCE_BAD = [40, 41, 42], [50, 51, 52]


def preference_group(pairs: int) -> list[TrajectoryGroup]:
    """One group of `pairs` (rewarded GOOD, unrewarded BAD) answer pairs to PREFERENCE_PROMPT,
    sampled choices with their token ids and logprobs: a step on it raises GOOD's logprobs."""
    from arthex.core.trajectories import Trajectory, TrajectoryGroup
    from arthex.testing.builders import sampled_choice

    trajectories = [
        Trajectory(
            messages_and_choices=[
                {"role": "user", "content": "q"},
                sampled_choice(
                    "x",
                    prompt_token_ids=PREFERENCE_PROMPT,
                    token_ids=tokens,
                    logprobs=[-6.5] * len(tokens),
                ),
            ],
            reward=reward,
        )
        for _ in range(pairs)
        for reward, tokens in ((1.0, PREFERENCE_GOOD), (0.0, PREFERENCE_BAD))
    ]
    return [TrajectoryGroup(trajectories)]
