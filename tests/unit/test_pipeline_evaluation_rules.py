"""The evaluation rules of a pipeline run: what `eval_fn` receives, which steps are evaluated
(at the start, every n steps, after a resume), where the results are filed, and which step is
the best. In-memory ports and event-loop turns, as in test_pipeline_evaluation.py."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import attrs
import pytest

from arthex.core.errors import InvalidInputError
from arthex.core.pipeline import PipelineTrainer
from arthex.core.pipeline.evaluation import DONE_KEY
from arthex.core.pipeline.rollouts import eval_groups
from arthex.core.trainable import TrainableModel
from arthex.core.trajectories import Trajectory, TrajectoryGroup

from ._pipeline_world import RUN, Script, World, turns


def trainer(
    world: World, eval_fn: Any, **options: Any
) -> PipelineTrainer[TrainableModel, Any, Any]:
    made = world.trainer(Script(), range(40), min_batch_size=2, max_batch_size=2, **options)
    made.eval_fn = eval_fn
    return made


def scoring(calls: list[int], reward: float = 0.5) -> Any:
    async def eval_fn(model: TrainableModel, step: int, config: Any) -> list[Trajectory]:
        calls.append(step)
        return [Trajectory(reward=reward), Trajectory(reward=reward)]

    return eval_fn


def resume_at_step_4(world: World, **changes: Any) -> None:
    """A first run of four updates, then its record as `changes` say a crash left it."""
    asyncio.run(trainer(world, None, max_steps=4).train())
    record = asyncio.run(world.state.load(RUN))
    assert record is not None and record.step == 4
    asyncio.run(world.state.save(RUN, attrs.evolve(record, **changes)))


def test_eval_fn_gets_the_trained_model_the_step_and_the_trainers_config() -> None:
    world = World()
    config = {"judge": "strict"}
    got: list[tuple[object, int, object]] = []

    async def eval_fn(model: TrainableModel, step: int, given: Any) -> list[Trajectory]:
        got.append((model, step, given))
        return [Trajectory(reward=1.0)]

    made = PipelineTrainer(
        world.model(),
        world.backend,
        Script().rollout_fn(),
        list(range(10)),
        config,
        eval_fn,
        state_store=world.state,
        min_batch_size=2,
        max_steps=1,
    )
    asyncio.run(made.train())
    assert got == [(made.model, 0, config)]


@pytest.mark.parametrize(("every", "steps"), [(0, [0]), (1, [0, 1, 2, 3])])
def test_eval_every_n_steps_zero_evaluates_only_the_start_and_one_every_step(
    every: int, steps: list[int]
) -> None:
    world = World()
    calls: list[int] = []
    asyncio.run(trainer(world, scoring(calls), max_steps=3, eval_every_n_steps=every).train())
    assert sorted(calls) == steps


def test_a_resume_does_not_evaluate_the_last_evaluated_step_again_and_counts_from_it() -> None:
    world = World()
    resume_at_step_4(world, last_eval_step=4, evaluations_due=())
    calls: list[int] = []
    asyncio.run(trainer(world, scoring(calls), max_steps=4, eval_every_n_steps=3).train())
    assert calls == [7], "4 was evaluated before the crash; the next is 4 + 3"


def test_a_resume_keeps_the_best_evaluation_until_one_scores_higher() -> None:
    world = World()
    resume_at_step_4(world, best_eval=(2, 0.9))
    calls: list[int] = []
    made = trainer(world, scoring(calls, reward=0.5), max_steps=2, eval_every_n_steps=2)
    asyncio.run(made.train())
    assert calls == [4, 6]
    record = asyncio.run(world.state.load(RUN))
    assert record is not None and record.best_eval == (2, 0.9)


def test_an_evaluation_that_ties_the_best_moves_it_to_the_later_step() -> None:
    world = World()
    calls: list[int] = []
    asyncio.run(trainer(world, scoring(calls), max_steps=4, eval_every_n_steps=2).train())
    record = asyncio.run(world.state.load(RUN))
    assert calls == [0, 2, 4]
    assert record is not None and record.best_eval == (4, 0.5)


def test_a_slow_evaluation_files_its_groups_under_the_step_it_evaluated() -> None:
    world = World()

    async def eval_fn(model: TrainableModel, step: int, config: Any) -> list[Trajectory]:
        while await world.backend.get_step(RUN) < 2:  # training goes on meanwhile
            await turns(1)
        return [Trajectory(reward=1.0)]

    asyncio.run(trainer(world, eval_fn, max_steps=3, eval_every_n_steps=0).train())
    assert asyncio.run(world.store.steps(RUN, "val")) == [0]
    rows = asyncio.run(world.history.rows(RUN))
    assert [r.step for r in rows if DONE_KEY in r.values] == [0]


def test_an_evaluation_without_a_val_split_leaves_no_best_and_retention_still_runs() -> None:
    world = World()

    async def eval_fn(model: TrainableModel, step: int, config: Any) -> Any:
        return {"test": [Trajectory(reward=0.5)]}

    made = trainer(world, eval_fn, max_steps=3, eval_every_n_steps=0, checkpoint_retention=1)
    asyncio.run(made.train())
    record = asyncio.run(world.state.load(RUN))
    assert record is not None and record.best_eval is None and record.step == 3
    assert asyncio.run(world.store.steps(RUN, "test")) == [0]


def test_the_evaluation_time_fits_inside_the_run() -> None:
    world = World()
    started = time.monotonic()
    asyncio.run(trainer(world, scoring([]), max_steps=2, eval_every_n_steps=0).train())
    elapsed = time.monotonic() - started
    rows = asyncio.run(world.history.rows(RUN))
    durations = [r.values[DONE_KEY] for r in rows if DONE_KEY in r.values]
    assert len(durations) == 1 and 0.0 <= (durations[0] or 0.0) <= elapsed


def test_an_eval_result_of_other_items_is_refused_naming_them_and_what_to_return() -> None:
    good = TrajectoryGroup([Trajectory(reward=1.0)])
    with pytest.raises(InvalidInputError) as caught:
        eval_groups({"test": [good, {"reward": 1.0}, "done"]})  # type: ignore[list-item]
    assert str(caught.value) == (
        "eval_fn returned ['TrajectoryGroup', 'dict', 'str'] under 'test'; return Trajectory "
        "or TrajectoryGroup items"
    )
