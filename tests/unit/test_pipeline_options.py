"""PipelineTrainer's options: the defaults docs/pipeline.md documents (ART 0.5.23's own), the
refusal of a bad value with a message naming the option and the smallest value it takes, and
the training settings each update is handed. In-memory ports, as in test_pipeline_updates.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from arthex.core.errors import InvalidInputError
from arthex.core.pipeline import PipelineTrainer, make_group_rollout_fn
from arthex.core.trainable import TrainableModel
from arthex.core.trajectories import Trajectory

from ._pipeline_world import Script, World
from .test_pipeline_updates import RecordingBackend, one_at_a_time, trajectory


def made(**options: Any) -> PipelineTrainer[TrainableModel, Any, Any]:
    return World().trainer(Script(), range(3), **options)


def test_the_batching_options_default_to_the_documented_values() -> None:
    """docs/pipeline.md (as ART): 16 workers, batches of 4 to 10 x 4 groups, at most 4 steps
    off policy, and a queue of max_steps_off_policy x max_batch_size = 4 x 40 groups."""
    trainer = made()
    assert trainer.num_rollout_workers == 16
    assert (trainer.min_batch_size, trainer.max_batch_size) == (4, 40)
    assert trainer.max_steps_off_policy == 4
    assert trainer.queue_maxsize == 160


@pytest.mark.parametrize(
    ("options", "queue"),
    [
        ({"min_batch_size": 2}, 4 * 20),
        ({"max_steps_off_policy": None, "min_batch_size": 1, "max_batch_size": 3}, 3),
        ({"max_steps_off_policy": 0, "min_batch_size": 1, "max_batch_size": 1}, 1),
        ({"queue_maxsize": 7}, 7),
    ],
    ids=["ten-times-min", "no-bound-one-batch", "at-least-one", "given"],
)
def test_the_queue_holds_the_bound_times_the_largest_batch_unless_given(
    options: dict[str, Any], queue: int
) -> None:
    assert made(**options).queue_maxsize == queue


def test_by_default_every_twentieth_step_is_evaluated_after_the_first() -> None:
    world = World()
    evaluated: list[int] = []

    async def eval_fn(model: TrainableModel, step: int, config: Any) -> list[Trajectory]:
        evaluated.append(step)
        return [Trajectory(reward=1.0)]

    trainer = one_at_a_time(world, 21)
    trainer.eval_fn = eval_fn
    asyncio.run(trainer.train())
    assert evaluated == [0, 20]


def test_updates_train_with_arts_default_learning_rate_and_normalized_advantages() -> None:
    world = World(backend=RecordingBackend())
    asyncio.run(one_at_a_time(world, 2).train())
    backend = world.backend
    assert isinstance(backend, RecordingBackend)
    assert [(c.learning_rate, c.scale_rewards) for c in backend.configs] == [(1e-5, True)] * 2
    assert all(c.grad_accumulation_sequences is None for c in backend.configs)


def test_updates_train_with_the_advantage_and_accumulation_settings_given() -> None:
    world = World(backend=RecordingBackend())
    trainer = one_at_a_time(world, 2, normalize_advantages=False, grad_accumulation_sequences=3)
    asyncio.run(trainer.train())
    backend = world.backend
    assert isinstance(backend, RecordingBackend)
    assert [(c.scale_rewards, c.grad_accumulation_sequences) for c in backend.configs] == [
        (False, 3)
    ] * 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_rollout_workers": 0}, "num_rollout_workers must be an integer >= 1, got 0"),
        ({"num_rollout_workers": None}, "num_rollout_workers must be an integer >= 1, got None"),
        ({"num_rollout_workers": 2.5}, "num_rollout_workers must be an integer >= 1, got 2.5"),
        ({"num_rollout_workers": True}, "num_rollout_workers must be an integer >= 1, got True"),
        ({"min_batch_size": 0}, "min_batch_size must be an integer >= 1, got 0"),
        (
            {"min_batch_size": 4, "max_batch_size": 3},
            "max_batch_size must be an integer >= 4, got 3",
        ),
        ({"queue_maxsize": 0}, "queue_maxsize must be an integer >= 1, got 0"),
        (
            {"max_steps_off_policy": -1},
            "max_steps_off_policy must be an integer >= 0, got -1",
        ),
        ({"max_steps": -1}, "max_steps must be an integer >= 0, got -1"),
        ({"eval_every_n_steps": -1}, "eval_every_n_steps must be an integer >= 0, got -1"),
        ({"kl_penalty_step_lag": 0}, "kl_penalty_step_lag must be an integer >= 1, got 0"),
        (
            {"checkpoint_retention": -1},
            "checkpoint_retention must be an integer >= 0, got -1",
        ),
    ],
    ids=lambda value: next(iter(value)) if isinstance(value, dict) else "",
)
def test_a_bad_option_is_refused_naming_it_and_its_smallest_value(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInputError) as raised:
        made(**options)
    assert str(raised.value) == message


def test_zero_is_accepted_where_the_documented_meaning_allows_it() -> None:
    """No steps at all, no step off policy, no periodic evaluation, no checkpoint beyond
    those in use."""
    trainer = made(
        max_steps=0, max_steps_off_policy=0, eval_every_n_steps=0, checkpoint_retention=0
    )
    assert (trainer.max_steps, trainer.max_steps_off_policy) == (0, 0)


def test_a_rollout_fn_that_is_not_callable_is_refused_naming_it() -> None:
    world = World()
    with pytest.raises(InvalidInputError) as raised:
        PipelineTrainer(world.model(), world.backend, "rollout", [1], None, state_store=world.state)  # type: ignore[arg-type]
    assert str(raised.value) == "rollout_fn must be callable, got 'rollout'"


def test_a_group_rollout_fn_runs_four_rollouts_by_default_each_with_the_config() -> None:
    seen: list[tuple[int, object]] = []

    async def single(model: TrainableModel, scenario: int, config: Any) -> Trajectory:
        seen.append((scenario, config))
        return trajectory(scenario, float(len(seen)))

    async def main() -> int:
        group = await make_group_rollout_fn(single)(World().model(), 5, {"k": 1})
        return len(group.trajectories)

    assert asyncio.run(main()) == 4
    assert seen == [(5, {"k": 1})] * 4


def test_a_group_of_one_rollout_is_allowed() -> None:
    async def single(model: TrainableModel, scenario: int, config: Any) -> Trajectory:
        return trajectory(scenario, 1.0)

    async def main() -> int:
        group = await make_group_rollout_fn(single, 1)(World().model(), 0, None)
        return len(group.trajectories)

    assert asyncio.run(main()) == 1


@pytest.mark.parametrize("n", [True, 2.5, "3"], ids=["bool", "float", "str"])
def test_a_group_size_that_is_not_an_integer_is_refused(n: Any) -> None:
    async def single(model: TrainableModel, scenario: int, config: Any) -> Trajectory:
        return trajectory(scenario, 1.0)

    with pytest.raises(InvalidInputError) as raised:
        make_group_rollout_fn(single, n)
    assert str(raised.value) == f"n must be an integer >= 1 (rollouts per group), got {n!r}"
