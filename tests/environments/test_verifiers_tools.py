"""A verifiers tool environment (`plugins/arthex_vf_weather.py`): the harness offers a tool,
the model (the tiny model taught the weather script) calls it twice and answers; arthex trains
the three calls as one sample, the tool results untrained, on exactly the sampled ids."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import arthex_vf_weather as weather
import pytest

import arthex
from arthex.adapters.local import LocalBackend
from arthex.core.capture import token_samples
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.environments import from_verifiers
from tests.e2e._scripted_model import scripted_model
from tests.e2e._weather import FINAL, SCRIPT

from .envs import load

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return scripted_model(tmp_path_factory.getbasetemp() / "scripted", SCRIPT)


def test_a_tool_environment_is_played_scored_and_trained_as_sampled(
    base_model: str, tmp_path: Path
) -> None:
    async def main() -> tuple[list[Trajectory], int]:
        environment = from_verifiers(load("arthex_vf_weather"), temperature=0, max_tokens=48)
        backend = LocalBackend(str(tmp_path))
        model = arthex.TrainableModel(
            name="weather", project="envs", base_model=base_model, base_path=str(tmp_path),
            report_metrics=[],
        )  # fmt: skip
        try:
            await model.register(backend)
            (task,) = environment.scenarios("train")
            trajectories = [await environment.rollout(model, task) for _ in range(2)]
            trajectories[1].reward = 0.0  # a group needs rewards that differ to train
            result = await model.train([TrajectoryGroup(trajectories)])
            return trajectories, result.step
        finally:
            await model.close()
            await backend.close()

    trajectories, step = asyncio.run(main())
    assert step == 1
    trajectory = trajectories[0]
    oracle: list[dict[str, Any]] = weather.RECEIVED[str(trajectory.metadata["verifiers_trace_id"])]
    # the episode as verifiers played and scored it: two tool calls, then the answer
    assert len(oracle) == 3
    names = [
        c["function"]["name"] for r in oracle[:2] for c in r["choices"][0]["message"]["tool_calls"]
    ]
    assert names == ["get_weather", "get_weather"]
    assert oracle[2]["choices"][0]["message"]["content"] == FINAL
    assert trajectory.reward == 1.0
    assert trajectory.metrics["answered"] == 1.0
    assert trajectory.metrics["tool_results"] == 2.0
    assert trajectory.metrics["num_turns"] == 3
    # one sample: the three sampled spans trained, the tool results between them not
    (sample,) = token_samples(trajectory, "weather")
    assert sample.choices == 3
    assert list(sample.sampled) == [t for r in oracle for t in r["choices"][0]["token_ids"]]
    assert (
        list(sample.tokens) == oracle[2]["prompt_token_ids"] + oracle[2]["choices"][0]["token_ids"]
    )
    tool_span_start = len(oracle[0]["prompt_token_ids"]) + len(oracle[0]["choices"][0]["token_ids"])
    tool_span_end = len(oracle[1]["prompt_token_ids"])
    assert tool_span_end > tool_span_start
    assert not any(sample.trained[tool_span_start:tool_span_end])
