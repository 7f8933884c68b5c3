"""Evaluations and checkpoint retention during a pipeline run (in-memory ports)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import attrs
import pytest

from arthex.core.pipeline.evaluation import DONE_KEY
from arthex.core.trainable import TrainableModel
from arthex.core.trajectories import Trajectory, TrajectoryGroup

from ._pipeline_world import RUN, Script, TurnsBackend, World, check_run


def evaluator(calls: list[int], rewards: dict[int, float] | None = None) -> Any:
    async def eval_fn(model: TrainableModel, step: int, config: Any) -> list[Trajectory]:
        calls.append(step)
        reward = (rewards or {}).get(step, float(step))
        return [Trajectory(reward=reward), Trajectory(reward=reward)]

    return eval_fn


def marker_steps(world: World) -> list[int]:
    rows = asyncio.run(world.history.rows(RUN))
    return sorted(r.step for r in rows if DONE_KEY in r.values)


def test_evaluations_run_at_the_start_and_every_n_steps_once_each() -> None:
    world = World(backend=TurnsBackend(5))
    calls: list[int] = []
    trainer = world.trainer(
        Script(),
        range(20),
        min_batch_size=2,
        max_batch_size=2,
        max_steps=6,
        eval_every_n_steps=2,
    )
    trainer.eval_fn = evaluator(calls)
    asyncio.run(trainer.train())
    assert sorted(calls) == [0, 2, 4, 6]
    assert marker_steps(world) == [0, 2, 4, 6]
    val_steps = asyncio.run(world.store.steps(RUN, "val"))
    assert val_steps == [0, 2, 4, 6]
    record = asyncio.run(world.state.load(RUN))
    assert record is not None and record.evaluations_due == () and record.best_eval == (6, 6.0)
    check_run(world, 20, bound=4, finished=False)


def test_an_evaluation_split_mapping_logs_each_split() -> None:
    world = World()

    async def eval_fn(model: TrainableModel, step: int, config: Any) -> Any:
        group = TrajectoryGroup([Trajectory(reward=1.0), Trajectory(reward=0.0)])
        return {"val": [group], "test": [Trajectory(reward=0.5)]}

    trainer = world.trainer(Script(), range(4), min_batch_size=2, max_steps=1)
    trainer.eval_fn = eval_fn
    asyncio.run(trainer.train())
    assert asyncio.run(world.store.steps(RUN, "test")) == [0]
    assert len(asyncio.run(world.store.read(RUN, "val", 0))) == 1


def test_a_failing_evaluation_warns_and_training_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World()

    async def eval_fn(model: TrainableModel, step: int, config: Any) -> list[Trajectory]:
        raise RuntimeError("the judge is down")

    trainer = world.trainer(Script(), range(10), min_batch_size=2, max_batch_size=2, max_steps=3)
    trainer.eval_fn = eval_fn
    with caplog.at_level(logging.WARNING, logger="arthex"):
        asyncio.run(trainer.train())
    assert "the judge is down" in caplog.text
    assert asyncio.run(world.backend.get_step(RUN)) == 3
    record = asyncio.run(world.state.load(RUN))
    assert record is not None and record.evaluations_due == ()


def test_a_resume_runs_due_evaluations_unless_their_marker_shows_they_finished() -> None:
    world = World()
    asyncio.run(world.trainer(Script(), range(10), min_batch_size=2, max_steps=2).train())
    record = asyncio.run(world.state.load(RUN))
    assert record is not None
    asyncio.run(world.model().log(None, split="val", step=1, metrics={DONE_KEY: 0.5}))
    asyncio.run(world.state.save(RUN, attrs.evolve(record, evaluations_due=(1, 2))))
    calls: list[int] = []
    trainer = world.trainer(Script(), range(10), min_batch_size=2, max_steps=0)
    trainer.eval_fn = evaluator(calls)
    trainer.eval_at_start = False
    asyncio.run(trainer.train())
    assert calls == [2], "step 1 had finished before the crash; step 2 had not"
    assert marker_steps(world) == [1, 2]


def test_retention_keeps_the_newest_checkpoints_and_the_best_evaluated_one() -> None:
    world = World()
    calls: list[int] = []
    trainer = world.trainer(
        Script(),
        range(40),
        min_batch_size=2,
        max_batch_size=2,
        max_steps=8,
        eval_every_n_steps=2,
        checkpoint_retention=2,
    )
    trainer.eval_fn = evaluator(calls, rewards={0: 0.0, 2: 0.9, 4: 0.1, 6: 0.2, 8: 0.3})
    asyncio.run(trainer.train())
    assert asyncio.run(world.backend.checkpoint_steps(RUN)) == [2, 7, 8]
    check_run(world, 40, bound=4, finished=False)


def test_without_save_checkpoint_only_steps_in_use_are_kept() -> None:
    world = World()
    trainer = world.trainer(
        Script(), range(20), min_batch_size=2, max_batch_size=2, max_steps=4, save_checkpoint=False
    )
    asyncio.run(trainer.train())
    kept = asyncio.run(world.backend.checkpoint_steps(RUN))
    assert kept[-1] == 4 and len(kept) <= 2, "the latest, and a step rollouts still sampled on"
