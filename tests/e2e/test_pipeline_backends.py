"""The pipeline on every backend: LocalBackend (torch, rollouts over HTTP), TinkerBackend
(the real SDK against the emulator) and ServerlessBackend (a training server on loopback with
LocalBackend behind it). Rollouts are real chat completions from each backend's endpoint, so
they sample while the next step trains; each run ends with the exactly-once and staleness
checks on the files a user would read."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import arthex
from arthex.art.metrics import PIPELINE_RL_METRIC_DEFINITIONS
from arthex.core.identity import RunRef
from arthex.ports.training_backend import TrainingBackend
from tests._pipeline_checks import Outcome, chat_rollout_fn, check_run_files

pytest.importorskip("torch")

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RUN = RunRef("pipeline", "agent")
SCENARIOS = 10
BOUND = 2


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


def run_pipeline(backend: TrainingBackend, tiny: str, base_path: Path) -> Outcome:
    async def main() -> Outcome:
        model = arthex.TrainableModel(
            name=RUN.name,
            project=RUN.project,
            base_model=tiny,
            base_path=str(base_path),
            report_metrics=[],
        )
        try:
            trainer = arthex.PipelineTrainer(
                model,
                backend,
                chat_rollout_fn(),
                range(SCENARIOS),
                None,
                num_rollout_workers=4,
                min_batch_size=2,
                max_batch_size=2,
                max_steps_off_policy=BOUND,
                learning_rate=1e-3,
                eval_fn=None,
            )
            await trainer.train()
            steps = await model.get_step()
        finally:
            await model.close()
            await backend.close()
        return await check_run_files(base_path, RUN, steps=steps, scenarios=SCENARIOS, bound=BOUND)

    return asyncio.run(main())


def test_local_backend_runs_the_pipeline(tiny: str, tmp_path: Path) -> None:
    from arthex.adapters.local import LocalBackend

    outcome = run_pipeline(LocalBackend(engine="torch", full_finetune=True), tiny, tmp_path)
    assert outcome.steps >= 3
    run_dir = tmp_path / RUN.project / "models" / RUN.name
    assert (run_dir / "pipeline_state.json").is_file()
    # every key of ART's metric catalogue that arthex.art offers is one this run wrote
    rows = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    written = {key for row in rows for key, value in row.items() if value is not None}
    offered = {d.key for d in PIPELINE_RL_METRIC_DEFINITIONS}
    assert offered <= written, sorted(offered - written)


@pytest.fixture(scope="module")
def emulator(tiny: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("tinker")
    from arthex.emulators.tinker import TinkerEmulator

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TINKER_TELEMETRY", "0")
        state = tmp_path_factory.mktemp("tinker-state")
        with TinkerEmulator(tiny, api_key="tml-pipeline", state_dir=str(state)) as running:
            yield running.base_url


def test_tinker_backend_runs_the_pipeline(
    emulator: str, tiny: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from arthex.adapters.tinker import TinkerBackend

    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    backend = TinkerBackend(base_url=emulator, api_key="tml-pipeline", timeout_s=120.0)
    outcome = run_pipeline(backend, tiny, tmp_path)
    assert outcome.steps >= 3


def test_serverless_backend_runs_the_pipeline(tiny: str, tmp_path: Path) -> None:
    from arthex.adapters.serverless import ServerlessBackend
    from tests._serverless import start_server

    server = start_server(tmp_path / "server" / "state", backend="local")
    try:
        outcome = run_pipeline(
            ServerlessBackend(server.url, server.fresh_key()), tiny, tmp_path / "art"
        )
    finally:
        server.stop()
    assert outcome.steps >= 3
