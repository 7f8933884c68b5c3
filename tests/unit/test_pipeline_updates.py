"""What each pipeline update hands on: the training settings the backend receives (the KL
reference step included), the metrics `on_step` gets, the step timings, and the checkpoints
retention keeps (the newest, the KL reference, and those a rollout still samples from).

In-memory ports and event-loop turns, as in test_pipeline.py (see _pipeline_world.py).
"""

from __future__ import annotations

import asyncio
import io
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from arthex.core.config import TrainConfig
from arthex.core.identity import RunRef
from arthex.core.pipeline import PipelineTrainer
from arthex.core.pipeline.workers import StepGate
from arthex.core.trainable import TrainableModel
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.ports.training_backend import BackendCapabilities, Capability
from arthex.testing.builders import make_choice

from ._pipeline_world import RUN, TurnsBackend, World, turns


class RecordingBackend(TurnsBackend):
    """The in-memory backend, also accepting a KL penalty (which its toy update ignores), and
    keeping the settings each update was asked to train with."""

    def __init__(self, train_turns: int = 0) -> None:
        super().__init__(train_turns)
        self.configs: list[TrainConfig] = []

    @property
    def capabilities(self) -> BackendCapabilities:
        return BackendCapabilities(set(super().capabilities.names) | {Capability.KL_PENALTY})

    async def train_steps(
        self, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        self.configs.append(config)
        async for sample in super().train_steps(run, groups, config):
            yield sample


def trajectory(scenario: int, reward: float) -> Trajectory:
    choice = make_choice("ab", token_ids=[10 + scenario % 40, 11], logprobs=-0.7)
    return Trajectory(
        messages_and_choices=[{"role": "user", "content": f"s{scenario}"}, choice], reward=reward
    )


async def two_rewards(model: TrainableModel, scenario: int, config: Any) -> TrajectoryGroup:
    """Scenario s scores s and s + 1: a group's mean reward is s + 0.5."""
    return TrajectoryGroup(
        [trajectory(scenario, float(scenario)), trajectory(scenario, 1.0 + scenario)]
    )


def one_at_a_time(
    world: World, scenarios: int, **options: Any
) -> PipelineTrainer[TrainableModel, Any, Any]:
    """One worker, batches of one group, no staleness allowed: update k trains scenario k,
    and no rollout is in flight on an older step when an update ends."""
    return PipelineTrainer(
        world.model(),
        world.backend,
        two_rewards,
        list(range(scenarios)),
        None,
        state_store=world.state,
        num_rollout_workers=1,
        min_batch_size=1,
        max_batch_size=1,
        max_steps_off_policy=0,
        **options,
    )


def test_each_update_trains_with_the_trainers_settings() -> None:
    world = World(backend=RecordingBackend())
    asyncio.run(one_at_a_time(world, 3, learning_rate=3e-4, loss_fn="ppo").train())
    backend = world.backend
    assert isinstance(backend, RecordingBackend)
    assert [(c.learning_rate, c.loss_fn) for c in backend.configs] == [(3e-4, "ppo")] * 3
    assert all(c.kl_penalty_reference_step is None for c in backend.configs), "no KL penalty"


@pytest.mark.parametrize(
    ("lag", "references"),
    [(None, [0, 0, 0, 0, 0]), (2, [0, 0, 0, 1, 2])],
    ids=["step-zero", "two-steps-back"],
)
def test_the_kl_reference_is_step_zero_or_the_step_lag_behind_never_below_zero(
    lag: int | None, references: list[int]
) -> None:
    world = World(backend=RecordingBackend())
    trainer = one_at_a_time(world, 5, kl_penalty_coef=0.1, kl_penalty_step_lag=lag)
    asyncio.run(trainer.train())
    backend = world.backend
    assert isinstance(backend, RecordingBackend)
    assert [c.kl_penalty_reference_step for c in backend.configs] == references
    assert all(c.kl_penalty_coef == 0.1 for c in backend.configs)


@pytest.mark.parametrize(
    ("lag", "retention", "kept"),
    [(None, 2, [0, 4, 5]), (2, 1, [3, 4, 5])],
    ids=["step-zero", "two-steps-back"],
)
def test_retention_keeps_the_kl_reference_of_this_update_and_of_those_to_come(
    lag: int | None, retention: int, kept: list[int]
) -> None:
    """At step 5: the newest `retention` checkpoints, and the references the KL penalty uses
    from now on: step 0 without a lag; with a lag of 2, 3 (the next update's) and 4."""
    world = World(backend=RecordingBackend())
    trainer = one_at_a_time(
        world, 5, kl_penalty_coef=0.1, kl_penalty_step_lag=lag, checkpoint_retention=retention
    )
    asyncio.run(trainer.train())
    assert asyncio.run(world.backend.checkpoint_steps(RUN)) == kept


def test_retention_keeps_exactly_the_newest_checkpoints_when_no_rollout_holds_an_older_one() -> (
    None
):
    world = World()
    asyncio.run(one_at_a_time(world, 6, checkpoint_retention=2).train())
    assert asyncio.run(world.backend.checkpoint_steps(RUN)) == [5, 6]


def test_a_checkpoint_is_not_deleted_while_a_rollout_still_samples_from_it() -> None:
    world = World(backend=TurnsBackend(train_turns=5))
    lost: list[int] = []
    outlived: list[int] = []

    async def slow(model: TrainableModel, scenario: int, config: Any) -> TrajectoryGroup:
        served = int(model.get_inference_name().rsplit("@", 1)[1])
        await turns(60)
        if served != await world.backend.get_step(RUN):
            outlived.append(served)  # an update ended while this rollout ran
            if served not in await world.backend.checkpoint_steps(RUN):
                lost.append(served)
        return TrajectoryGroup([trajectory(scenario, 0.0), trajectory(scenario, 1.0)])

    trainer = PipelineTrainer(
        world.model(),
        world.backend,
        slow,
        list(range(6)),
        None,
        state_store=world.state,
        num_rollout_workers=1,
        min_batch_size=1,
        max_batch_size=1,
        save_checkpoint=False,
    )
    asyncio.run(trainer.train())
    assert outlived, "the run must have a rollout that spans an update"
    assert lost == []


def test_on_step_gets_the_batchs_train_metrics_at_the_new_step() -> None:
    world = World()
    seen: list[tuple[int, dict[str, float | None]]] = []
    trainer = one_at_a_time(world, 3, on_step=lambda step, m: seen.append((step, dict(m))))
    asyncio.run(trainer.train())
    assert [step for step, _ in seen] == [1, 2, 3]
    # update k trains scenario k alone: rewards k and k + 1
    assert [m["train/reward"] for _, m in seen] == [0.5, 1.5, 2.5]
    assert all("time/step_wall_s" in m for _, m in seen)


def test_step_timings_fit_inside_the_run_and_training_inside_its_step() -> None:
    world = World(backend=TurnsBackend(train_turns=3))
    seen: list[dict[str, float | None]] = []
    trainer = one_at_a_time(world, 4, on_step=lambda step, m: seen.append(dict(m)))
    started = time.monotonic()
    asyncio.run(trainer.train())
    elapsed = time.monotonic() - started
    walls = [m["time/step_wall_s"] or 0.0 for m in seen]
    trains = [m["time/step_backend_train_s"] or 0.0 for m in seen]
    assert len(walls) == 4 and sum(walls) <= elapsed
    assert all(0.0 <= t <= w for t, w in zip(trains, walls, strict=True))


def test_the_gate_counts_a_group_admitted_once_until_it_leaves_the_batches_to_come() -> None:
    async def main() -> bool:
        gate = StepGate(0, 1, 2, asyncio.Event())  # bound 1, batches of 2: four may start
        for _ in range(4):
            await gate.admit()
        await gate.release([0, 0, 0])  # three left; the fourth is still ahead
        for _ in range(3):
            await gate.admit()
        return gate.fresh_enough()

    assert not asyncio.run(main()), "four admitted ahead again: the next one waits"


def test_while_a_step_trains_a_rollout_within_the_bound_may_start_on_it() -> None:
    async def main() -> bool:
        gate = StepGate(0, 1, 1, asyncio.Event())
        await gate.admit()
        await gate.update_started(0, [0])  # 0 -> 1 trains; the group left the batches to come
        return gate.fresh_enough()

    assert asyncio.run(main()), "it joins update 1 -> 2, one step after the one it samples"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_an_update_draws_no_gradient_step_line_even_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rollouts keep running and logging during an update: a line redrawn per gradient step
    would tear. The pipeline's own line is drawn once per update, after it (see
    test_pipeline_status.py)."""
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    asyncio.run(one_at_a_time(World(), 2, max_steps=2).train())
    drawn = terminal.getvalue()
    assert "gradient step" not in drawn
    assert [frame.split(" [")[0] for frame in drawn.rstrip("\n").split("\r")[1:]] == [
        "pipeline pipe/model: update"
    ] * 2
