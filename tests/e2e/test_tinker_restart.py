"""Restarts of a Tinker run: the backend (and the service) go away, and a new backend on the
same model directory resumes from the newest saved state, with the real SDK against the
emulator. Also: the emulator runs as a command, the way users start it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tinker")
pytest.importorskip("torch")

from arthex.adapters.tinker import TinkerBackend
from arthex.core.config import TrainConfig
from arthex.core.identity import ModelSpec, RunRef
from arthex.core.trajectories import TrajectoryGroup
from arthex.emulators.tinker import TinkerEmulator
from tests._tinker import PREFERENCE_BAD, PREFERENCE_GOOD, PREFERENCE_PROMPT, preference_group

pytestmark = pytest.mark.e2e

KEY = "tml-restart"
TIMEOUT_S = 120.0
PROMPT, GOOD, BAD = PREFERENCE_PROMPT, PREFERENCE_GOOD, PREFERENCE_BAD
LEARN = TrainConfig(learning_rate=3e-3)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINKER_TELEMETRY", "0")


REPO = Path(__file__).resolve().parents[2]
CRASH = """
import asyncio, os, sys
from arthex.adapters.tinker import TinkerBackend
from arthex.core.identity import ModelSpec, RunRef
from tests.e2e.test_tinker_restart import KEY, TIMEOUT_S, train_steps

url, tiny, base = sys.argv[1:4]
spec = ModelSpec(RunRef("restart", "agent"), base_model=tiny, base_path=base)
backend = TinkerBackend(base_url=url, api_key=KEY, timeout_s=TIMEOUT_S)
print(f"trained to step {asyncio.run(train_steps(backend, spec, 2))}", flush=True)
os._exit(0)
"""


def preference() -> list[TrajectoryGroup]:
    return preference_group(2)


async def train_steps(backend: TinkerBackend, spec: ModelSpec, steps: int) -> int:
    await backend.register(spec)
    for _ in range(steps):
        async for _m in backend.train_steps(spec.run, preference(), LEARN):
            pass
    return await backend.get_step(spec.run)


def record(spec: ModelSpec) -> dict[str, Any]:
    path = Path(spec.base_path) / spec.run.project / "models" / spec.run.name / "tinker-run.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def good_logprob(base_url: str, sampler_path: str) -> float:
    import tinker
    from tinker import types

    service = tinker.ServiceClient(base_url=base_url, api_key=KEY)
    try:
        sampler = service.create_sampling_client(model_path=sampler_path).result(TIMEOUT_S)
        scored = sampler.compute_logprobs(types.ModelInput.from_ints([*PROMPT, *GOOD]))
        values = scored.result(TIMEOUT_S)
    finally:
        service.close("success").result(TIMEOUT_S)
    return float(sum(v for v in values[len(PROMPT) :] if v is not None))


def test_a_new_backend_and_a_restarted_service_resume_from_the_newest_state(
    tiny: str, tmp_path: Path
) -> None:
    state_dir = str(tmp_path / "tinker-state")
    spec = ModelSpec(RunRef("restart", "agent"), base_model=tiny, base_path=str(tmp_path / "art"))

    with TinkerEmulator(tiny, api_key=KEY, state_dir=state_dir, torch_threads=1) as first:
        # A process that dies with its Tinker session open (no close, no exit hooks): a real
        # one, so nothing of it (its session's heartbeat) lives on in this one.
        done = subprocess.run(
            [sys.executable, "-c", CRASH, first.base_url, tiny, spec.base_path],
            cwd=REPO,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.stdout.strip() == "trained to step 2", done.stderr[-3000:]
    before = record(spec)
    paths = {c["step"]: c for c in before["checkpoints"]}
    assert sorted(paths) == [0, 1, 2] and all(c["state_path"] for c in paths.values())

    with TinkerEmulator(tiny, api_key=KEY, state_dir=state_dir, torch_threads=1) as second:
        resumed = TinkerBackend(base_url=second.base_url, api_key=KEY, timeout_s=TIMEOUT_S)

        async def after_restart() -> tuple[int, list[int], int]:
            try:
                await resumed.register(spec)
                step, steps = (
                    await resumed.get_step(spec.run),
                    await resumed.checkpoint_steps(spec.run),
                )
                async for _m in resumed.train_steps(spec.run, preference(), LEARN):
                    pass
                return step, steps, await resumed.get_step(spec.run)
            finally:
                await resumed.close()

        assert asyncio.run(after_restart()) == (2, [0, 1, 2], 3)
        after = record(spec)
        assert after["training_run_id"] != before["training_run_id"]
        assert second.route_counts["POST load_weights"] == 1
        scores = {
            c["step"]: good_logprob(second.base_url, c["sampler_path"])
            for c in after["checkpoints"]
        }
    # Training went on from step 2's weights: had it restarted from the base weights, step 3
    # would sit near step 1, below step 2.
    assert scores[0] < scores[1] < scores[2] < scores[3], scores


def test_the_emulator_command_serves_the_sdk(tiny: str, tmp_path: Path) -> None:
    import tinker
    from tinker import types

    port = _free_port()
    env = {**os.environ, "TINKER_TELEMETRY": "0"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "arthex.emulators.tinker",
            "--base-model",
            tiny,
            "--model-name",
            "tiny",
            "--port",
            str(port),
            "--threads",
            "1",
            "--state-dir",
            str(tmp_path / "state"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        assert f"http://127.0.0.1:{port}" in banner, banner
        service = tinker.ServiceClient(base_url=f"http://127.0.0.1:{port}", api_key="tml-user")
        training = service.create_lora_training_client("tiny", rank=4).result(TIMEOUT_S)
        saved = training.save_weights_for_sampler("first").result(TIMEOUT_S)
        sampler = service.create_sampling_client(model_path=saved.path).result(TIMEOUT_S)
        prompt = types.ModelInput.from_ints(PROMPT)
        params = types.SamplingParams(max_tokens=4, seed=1)
        response = sampler.sample(prompt, 2, params).result(TIMEOUT_S)
        service.close("success").result(TIMEOUT_S)
        assert len(response.sequences) == 2
        for sequence in response.sequences:
            assert 1 <= len(sequence.tokens) <= 4
            assert sequence.logprobs is not None and len(sequence.logprobs) == len(sequence.tokens)
            assert sequence.sequence_id
        assert (tmp_path / "state" / "runs").is_dir()
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
