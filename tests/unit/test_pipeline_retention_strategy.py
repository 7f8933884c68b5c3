"""A retention strategy on the PipelineTrainer (ART's `checkpoint_retention_strategy`): it is
shown only the checkpoints nothing uses, with the history's values at their steps, every
`checkpoint_retention_interval` steps, and those it does not keep are deleted."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from arthex.art.pipeline_trainer import (
    CheckpointInfo,
    CheckpointRetentionContext,
    keep_recent_and_top,
)
from arthex.core.errors import InvalidInputError
from arthex.core.pipeline.retention_strategy import RetentionContext

from ._pipeline_world import RUN, World
from .test_pipeline_updates import one_at_a_time


def test_the_strategy_sees_what_nothing_uses_and_keeps_what_it_returns() -> None:
    shown: list[tuple[int, list[int]]] = []

    def keep_even(context: RetentionContext) -> set[int]:
        shown.append((context.current_step, [c.step for c in context.checkpoints]))
        assert all(c.path.endswith(f"@{c.step}") for c in context.checkpoints)
        assert all("train/reward" in c.metrics for c in context.checkpoints if c.step)
        return {c.step for c in context.checkpoints if c.step % 2 == 0}

    world = World()
    asyncio.run(one_at_a_time(world, 5, checkpoint_retention_strategy=keep_even).train())
    assert asyncio.run(world.backend.checkpoint_steps(RUN)) == [0, 2, 4, 5]
    # never the step just trained; a step kept once is shown again
    assert shown[-1] == (5, [0, 2, 4])
    assert all(step not in steps for step, steps in shown)


def test_the_strategy_runs_every_interval_steps_only() -> None:
    world = World()
    keep_none = one_at_a_time(
        world, 5, checkpoint_retention_strategy=lambda context: (), checkpoint_retention_interval=3
    )
    asyncio.run(keep_none.train())
    assert asyncio.run(world.backend.checkpoint_steps(RUN)) == [3, 4, 5]  # decided at step 3


def test_a_strategy_and_a_count_together_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="without checkpoint_retention"):
        one_at_a_time(
            World(), 1, checkpoint_retention=2, checkpoint_retention_strategy=lambda context: ()
        )
    with pytest.raises(InvalidInputError, match="checkpoint_retention_interval"):
        one_at_a_time(World(), 1, checkpoint_retention_interval=0)


def test_keep_recent_and_top_keeps_the_newest_and_the_best_by_the_metric() -> None:
    made = datetime(2026, 1, 1, tzinfo=UTC)
    scores = {1: 0.9, 2: 0.1, 3: 0.9, 4: 0.5, 6: 0.2}
    context = CheckpointRetentionContext(
        current_step=8,
        checkpoints=[
            CheckpointInfo(
                step=s,
                path=f"m@{s}",
                created_at=made,
                metrics={"val/reward": scores[s]} if s in scores else {},
            )
            for s in range(1, 8)
        ],
    )
    strategy = keep_recent_and_top(recent=2, top=2, metric="val/reward")
    assert set(strategy(context)) == {6, 7, 3, 1}  # ties go to the later step first
    assert set(keep_recent_and_top(recent=0, top=1, metric="val/reward")(context)) == {3}
    with pytest.raises(ValueError, match="recent"):
        keep_recent_and_top(recent=-1)
