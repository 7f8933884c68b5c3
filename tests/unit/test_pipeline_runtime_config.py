"""`PipelineTrainer(pipeline=PipelineRuntimeConfig(...))`, ART 0.5.23's form of the runtime
settings: the value's workers, batch bounds and queue size are the trainer's, given alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic
import pytest

from arthex.art import PipelineRuntimeConfig
from arthex.core.errors import InvalidInputError
from arthex.core.pipeline import PipelineTrainer

from ._pipeline_world import RUN, World
from .test_pipeline_updates import two_rewards


def trainer(
    world: World, off_policy: int | None = 0, **options: Any
) -> PipelineTrainer[Any, Any, Any]:
    return PipelineTrainer(
        world.model(),
        world.backend,
        two_rewards,
        list(range(3)),
        None,
        state_store=world.state,
        max_steps_off_policy=off_policy,
        **options,
    )


def test_the_config_sets_the_workers_batches_and_queue() -> None:
    world = World()
    made = trainer(
        world,
        pipeline=PipelineRuntimeConfig(
            num_rollout_workers=1, min_batch_size=1, max_batch_size=1, queue_maxsize=3
        ),
    )
    settings = (
        made.num_rollout_workers,
        made.min_batch_size,
        made.max_batch_size,
        made.queue_maxsize,
    )
    assert settings == (1, 1, 1, 3)
    asyncio.run(made.train())
    assert asyncio.run(world.backend.checkpoint_steps(RUN)) == [0, 1, 2, 3]  # a group a step


def test_the_config_and_the_separate_settings_are_not_mixed() -> None:
    with pytest.raises(InvalidInputError, match=r"not both"):
        trainer(World(), pipeline=PipelineRuntimeConfig(), min_batch_size=2)
    with pytest.raises(pydantic.ValidationError, match="max_batch_size must be >= min_batch_size"):
        PipelineRuntimeConfig(min_batch_size=4, max_batch_size=2)
    with pytest.raises(pydantic.ValidationError, match="extra"):
        PipelineRuntimeConfig(workers=2)  # type: ignore[call-arg]
