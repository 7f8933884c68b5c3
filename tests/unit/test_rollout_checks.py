"""`benchmark_rollout`'s refusals (what it shares with ART is checked against ART's code in
tests/interop/test_art_rollout_checks.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from arthex.core.errors import InvalidInputError
from arthex.core.trajectories import Trajectory
from arthex.utils.rollout_checks import benchmark_rollout


async def rollout(model: str, i: int, is_validation: bool) -> Trajectory:
    return Trajectory(messages_and_choices=[{"role": "user", "content": model}], reward=i)


async def not_a_rollout(model: str, i: int, is_validation: bool) -> Any:
    return {"reward": 1.0}


def test_benchmark_rollout_refuses_a_bad_count_and_a_rollout_that_returns_no_trajectory() -> None:
    for count in (0, -2, True, 1.5):
        with pytest.raises(InvalidInputError, match="num_rollouts must be an integer >= 1"):
            asyncio.run(benchmark_rollout("m", count, rollout))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="a rollout returned dict, not a Trajectory"):
        asyncio.run(benchmark_rollout("m", 2, not_a_rollout))
    assert asyncio.run(benchmark_rollout("m", 3, rollout)) == 1.0  # (0 + 1 + 2) / 3
