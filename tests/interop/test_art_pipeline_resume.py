"""A pipeline run that ART 0.5.23's PipelineTrainer left goes on under arthex's PipelineTrainer.

Two runs. The first: ART's own PipelineTrainer, unmodified, trains two steps in ART's venv
(the one with torch, art_tinker_env.py: ART's trainer imports ART's LocalBackend module to ask
whether its backend is one) on ART's own ServerlessBackend against `arthex serve --backend
local` (the tiny model on CPU; ART's LocalBackend needs a GPU), leaving its record in the run's
`state.json` as ART does (art/pipeline_run_script.py); arthex's PipelineTrainer, on arthex's
ServerlessBackend against the same server and the same run directory, trains the next step.
The second: arthex's LocalBackend (torch, the tiny model) trains a run to step 1, and ART's own
`PipelineTrainer._persist_state` writes a chosen record into its `state.json`
(art/pipeline_state_script.py: ART took 6 scenarios, trained 2 groups, discarded 1 stale and
3 equal-reward groups, and evaluated step 1), so that the counts and the evaluation steps
are known; arthex's PipelineTrainer trains two steps on LocalBackend.

Both show: the first scenario arthex's rollout function receives is ART's `scenario_offset`
(the physical oracle: the scenarios the rollout function is called with), the history rows
carry ART's counts on (`discarded/cum/*` from ART's counts, the rates over ART's groups too),
arthex's own record is in `pipeline_state.json`, and `state.json` is byte for byte what ART
wrote. The second also shows the next evaluation counted from ART's last one (ART's rule:
`step - last_eval_step >= eval_every_n_steps`, so step 3, not step 2).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

import arthex
from arthex.art.pipeline_trainer import trainer as art_trainer
from arthex.core.identity import RunRef
from tests._pipeline_checks import chat_rollout_fn

from .art_env import SCRIPTS, art_environment, art_python
from .art_tinker_env import art_tinker_python

pytest.importorskip("torch")

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RUN = RunRef("pipeline", "agent")
ART_STATE: dict[str, Any] = {
    "scenario_offset": 6,
    "total_scenarios_consumed": 6,
    "accepted_trainable_groups": 2,
    "discarded_stale_groups": 1,
    "discarded_zero_variance_groups": 3,
    "last_eval_step": 1,
    "completed_eval_steps": [0, 1],
}
EVERY = 2


def model_of(tiny: str, base_path: Path) -> arthex.TrainableModel:
    model = arthex.TrainableModel(
        name=RUN.name,
        project=RUN.project,
        base_model=tiny,
        base_path=str(base_path),
        report_metrics=[],
    )
    model.run_diagnostics.expect("empty", "equal_rewards", "truncated")
    return model


def train_to_step_one(tiny: str, base_path: Path) -> None:
    async def main() -> None:
        from arthex.adapters.local import LocalBackend

        model = model_of(tiny, base_path)
        backend = LocalBackend(engine="torch", full_finetune=True, seed=0)
        try:
            await model.register(backend)
            group = await chat_rollout_fn()(model, 0, None)
            await model.train([group], arthex.TrainConfig(learning_rate=1e-3))
            assert await model.get_step() == 1
        finally:
            await model.close()
            await backend.close()

    asyncio.run(main())


def arts_record(base_path: Path) -> dict[str, Any]:
    cases = {
        "base_path": str(base_path), "project": RUN.project, "name": RUN.name,
        "state": ART_STATE, "training_step": 1, "profile": "tuned",
    }  # fmt: skip
    done = subprocess.run(
        [str(art_python()), str(SCRIPTS / "pipeline_state_script.py")],
        input=json.dumps(cases), capture_output=True, text=True, env=art_environment(),
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-6000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_arthex_continues_the_scenario_stream_and_counts_art_left(
    tiny: str, tmp_path: Path
) -> None:
    from arthex.adapters.local import LocalBackend

    train_to_step_one(tiny, tmp_path)
    run_dir = tmp_path / RUN.project / "models" / RUN.name
    assert not (run_dir / "pipeline_state.json").exists()
    art = arts_record(tmp_path)
    key = art["key"]
    assert key == art_trainer.PIPELINE_STATE_KEY
    assert art["state"][key] == {
        **ART_STATE, "training_step": 1, "pipeline_tuner_profile": "tuned",
    }  # fmt: skip
    state_bytes = (run_dir / "state.json").read_bytes()

    sampled: list[int] = []
    evaluated: list[int] = []
    rollout = chat_rollout_fn()

    async def rollout_fn(model: arthex.TrainableModel, scenario: int, config: object) -> Any:
        sampled.append(scenario)
        return await rollout(model, scenario, config)

    async def eval_fn(model: arthex.TrainableModel, step: int, config: object) -> Any:
        evaluated.append(step)
        return [await rollout(model, 100 + step, config)]

    async def main() -> int:
        model = model_of(tiny, tmp_path)
        backend = LocalBackend(engine="torch", full_finetune=True, seed=0)
        try:
            trainer = arthex.PipelineTrainer(
                model, backend, rollout_fn, range(20), None, eval_fn,
                num_rollout_workers=1, min_batch_size=2, max_batch_size=2,
                max_steps_off_policy=None, max_steps=2, learning_rate=1e-3,
                eval_every_n_steps=EVERY, eval_at_start=False,
            )  # fmt: skip
            await trainer.train()
            return await model.get_step()
        finally:
            await model.close()
            await backend.close()

    assert asyncio.run(main()) == 3
    # the stream goes on at ART's offset: nothing ART took is sampled again
    assert sampled[0] == ART_STATE["scenario_offset"]
    assert min(sampled) == ART_STATE["scenario_offset"]
    assert sampled == sorted(sampled) == list(range(6, 6 + len(sampled)))
    # ART's rule from ART's last evaluation (step 1): step 3 is due, step 2 is not
    assert evaluated == [3]

    rows = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    pipeline_rows = {
        row["step"]: row for row in rows if row.get("discarded/cum/stale_groups") is not None
    }
    assert sorted(pipeline_rows) == [2, 3]
    trained = ART_STATE["accepted_trainable_groups"]
    stale = ART_STATE["discarded_stale_groups"]
    equal = ART_STATE["discarded_zero_variance_groups"]
    errored = 0
    for step in (2, 3):
        row = pipeline_rows[step]
        stale += row["discarded/step/stale_groups"]
        equal += row["discarded/step/zero_variance_groups"]
        errored += row["discarded/step/errored_groups"]
        assert row["discarded/cum/stale_groups"] == stale
        assert row["discarded/cum/zero_variance_groups"] == equal
        seen = trained + stale + equal + errored
        assert row["discarded/rate/stale_groups"] == pytest.approx(stale / seen)
        assert row["discarded/rate/zero_variance_groups"] == pytest.approx(equal / seen)
        trained += 2

    record = json.loads((run_dir / "pipeline_state.json").read_bytes())
    assert record["step"] == 3
    assert record["offset"] == max(sampled) + 1
    assert record["trained_groups"] == trained
    assert record["discarded_unlisted"] == {
        "stale": ART_STATE["discarded_stale_groups"],
        "zero_variance": ART_STATE["discarded_zero_variance_groups"],
        "errored": 0,
    }
    assert record["last_eval_step"] == 3
    assert record["evaluated"] == [0, 1, 3]
    # ART's record is ART's: read, never written
    assert (run_dir / "state.json").read_bytes() == state_bytes


# -- ART's own PipelineTrainer, on ART's ServerlessBackend against `arthex serve` ----------------

ART_SCENARIOS = 40


def run_arts_trainer(server: Any, key: str, tiny: str, base_path: Path) -> dict[str, Any]:
    cases = {
        "base_url": server.url + "/v1", "api_key": key, "base_model": tiny,
        "base_path": str(base_path), "project": RUN.project, "name": "alias",
        "run_name": RUN.name, "scenarios": ART_SCENARIOS, "max_steps": 2, "batch": 2,
    }  # fmt: skip
    done = subprocess.run(
        [str(art_tinker_python()), str(SCRIPTS / "pipeline_run_script.py")],
        input=json.dumps(cases), capture_output=True, text=True, env=art_environment(),
        timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-6000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_arthex_continues_a_run_arts_own_pipeline_trainer_trained(
    tiny: str, tmp_path: Path
) -> None:
    from arthex.adapters.serverless import ServerlessBackend
    from tests._serverless import launch_server

    server = launch_server(tmp_path / "server" / "state", backend="local").wait()
    try:
        _, key = server.fresh_tenant()
        art_run = run_arts_trainer(server, key, tiny, tmp_path / "art")
        run_dir = tmp_path / "art" / RUN.project / "models" / RUN.name
        state_bytes = (run_dir / "state.json").read_bytes()
        arts = art_run["state"][art_trainer.PIPELINE_STATE_KEY]
        offset = arts["scenario_offset"]
        # ART's trainer trained two steps; it took the scenarios in order, each once
        assert art_run["step"] == arts["training_step"] == 2
        assert art_run["sampled"] == list(range(offset))
        assert arts["accepted_trainable_groups"] == 4
        assert arts["discarded_zero_variance_groups"] == 1  # scenario 2's equal group
        assert offset < ART_SCENARIOS
        assert not (run_dir / "pipeline_state.json").exists()

        sampled: list[int] = []
        rollout = chat_rollout_fn()

        async def rollout_fn(model: Any, scenario: int, config: object) -> Any:
            sampled.append(scenario)
            return await rollout(model, scenario, config)

        async def main() -> int:
            model = arthex.art.TrainableModel(
                name="alias", run_name=RUN.name, project=RUN.project, base_model=tiny,
                base_path=str(tmp_path / "art"), report_metrics=[],
            )  # fmt: skip
            model.run_diagnostics.expect("empty", "equal_rewards", "truncated")
            backend = ServerlessBackend(api_key=key, base_url=server.url + "/v1")
            try:
                trainer = arthex.PipelineTrainer(
                    model, backend, rollout_fn, range(ART_SCENARIOS), None,
                    num_rollout_workers=1, min_batch_size=2, max_batch_size=2,
                    max_steps=1, learning_rate=1e-3,
                )  # fmt: skip
                await trainer.train()
                return int(await model.get_step())
            finally:
                await model.close()
                await backend.close()

        assert asyncio.run(main()) == 3
    finally:
        server.stop()
    # the stream goes on where ART's left it: nothing ART took is sampled again
    assert sampled[0] == offset == min(sampled)
    rows = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    (row,) = [r for r in rows if r.get("discarded/cum/stale_groups") is not None and r["step"] == 3]
    for reason, field in (("stale", "stale"), ("zero_variance", "zero_variance")):
        assert row[f"discarded/cum/{reason}_groups"] == (
            arts[f"discarded_{field}_groups"] + row[f"discarded/step/{reason}_groups"]
        )
    record = json.loads((run_dir / "pipeline_state.json").read_bytes())
    assert record["trained_groups"] == arts["accepted_trainable_groups"] + 2
    assert record["discarded_unlisted"]["zero_variance"] == 1
    assert (run_dir / "state.json").read_bytes() == state_bytes
