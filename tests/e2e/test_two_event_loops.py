"""A script that calls `asyncio.run` more than once with one LocalBackend: the inference
server started on the first loop serves the second one too (it used to keep its socket open
on the ended loop, so the second run's first request waited forever)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

import arthex
from arthex.core.config import TrainConfig
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.testing.tiny_model import tiny_model

# long enough for a loaded machine to answer; the old server never did
ANSWER_WITHIN_S = 300.0


async def rollout(model: arthex.TrainableModel) -> tuple[str, TrajectoryGroup]:
    """One group of real rollouts through `model.openai_client()` on the running loop; the
    base URL the client used and the group, rewarded by index so it trains."""
    client = model.openai_client()
    messages: list[Any] = [{"role": "user", "content": "Count to 3."}]
    name = model.get_inference_name()
    response = await asyncio.wait_for(
        client.chat.completions.create(
            model=name, messages=messages, n=4, max_tokens=4, logprobs=True
        ),
        ANSWER_WITHIN_S,
    )
    assert response.model == name
    assert len(response.choices) == 4
    group = TrajectoryGroup(
        Trajectory(messages_and_choices=[*messages, c], reward=float(i % 2))
        for i, c in enumerate(response.choices)
    )
    return str(client.base_url), group


def test_one_backend_serves_and_trains_across_two_asyncio_runs(tmp_path: Path) -> None:
    base = tiny_model(tmp_path / "base")
    backend = arthex.LocalBackend()
    model = arthex.TrainableModel(
        name="twice", project="loops", base_model=base, base_path=str(tmp_path / "runs")
    )
    config = TrainConfig(learning_rate=1e-3)

    async def first() -> str:
        await model.register(backend)
        url, group = await rollout(model)
        await model.train([group], config=config)
        return url

    async def second() -> str:
        assert await model.get_step() == 1
        url, group = await rollout(model)  # served by the step-1 name, on this loop
        await model.train([group], config=config)
        assert await model.get_step() == 2
        again, _ = await rollout(model)  # the step trained on this loop is served here
        assert again == url
        return url

    try:
        first_url = asyncio.run(first())
        second_url = asyncio.run(second())
    finally:
        asyncio.run(backend.close())
    assert second_url == first_url  # the same server, on the same port
    checkpoints = tmp_path / "runs" / "loops" / "models" / "twice" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["0000", "0001", "0002"]
