"""A pipeline run on the in-memory ports, with scripted rollouts and crash points, and the
checks every test of the pipeline makes: each scenario of the stream trained exactly once or
discarded, no update older than the bound, and steps contiguous in the store and the history.

Latencies are counted in event-loop turns, not seconds, so a run is fast and the same every
time. The checks read the store and the history (what any reader sees) and what the rollouts
themselves recorded (the step they were served), not the pipeline's own bookkeeping, except
for discards, which only the record lists.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import attrs

from arthex.core.config import TrainConfig
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow
from arthex.core.pipeline import PipelineTrainer, RolloutFn, make_group_rollout_fn
from arthex.core.pipeline_record import PipelineRecord
from arthex.core.trainable import TrainableModel
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.testing.builders import make_choice
from arthex.testing.fakes.backend import InMemoryBackend
from arthex.testing.fakes.history import InMemoryHistory
from arthex.testing.fakes.pipeline_state import InMemoryPipelineStateStore
from arthex.testing.fakes.stores import InMemoryTrajectoryStore
from tests._pipeline_checks import SERVED_KEY, Outcome, check_pipeline_run

RUN = RunRef("pipe", "model")


class Crash(Exception):
    """Stands for a process dying at one point: raised right after a chosen port call."""


async def turns(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


class TurnsBackend(InMemoryBackend):
    """The in-memory backend with `train_turns` event-loop turns per update, so rollouts run
    while a step trains, and an optional crash once the n-th checkpoint exists."""

    def __init__(self, train_turns: int = 0) -> None:
        super().__init__()
        self.train_turns = train_turns
        self.crash_after_checkpoint: int | None = None

    async def train_steps(
        self, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        await turns(self.train_turns)
        first = True
        async for sample in super().train_steps(run, groups, config):
            # the parent saves the checkpoint before it yields the first sample
            if first and self.crash_after_checkpoint is not None:
                self.crash_after_checkpoint -= 1
                if self.crash_after_checkpoint == 0:
                    raise Crash("after the checkpoint, before the training row")
            first = False
            yield sample


class CrashingStore(InMemoryTrajectoryStore):
    crash_on_train_write: int | None = None

    async def write(
        self, run: RunRef, split: str, step: int, groups: Sequence[TrajectoryGroup]
    ) -> str:
        where = await super().write(run, split, step, groups)
        if split == "train" and self.crash_on_train_write is not None:
            self.crash_on_train_write -= 1
            if self.crash_on_train_write == 0:
                raise Crash("after the train groups were stored, before their row")
        return where


class CrashingHistory(InMemoryHistory):
    crash_on: tuple[str, int] | None = None  # (a key the row holds, n-th such row)

    async def report(self, run: RunRef, row: MetricsRow) -> None:
        await super().report(run, row)
        if self.crash_on is not None and self.crash_on[0] in row.values:
            key, left = self.crash_on
            self.crash_on = (key, left - 1)
            if left == 1:
                raise Crash(f"after the row holding {key}")


class CrashingState(InMemoryPipelineStateStore):
    crash_on_save: int | None = None

    async def save(self, run: RunRef, record: PipelineRecord) -> None:
        await super().save(run, record)
        if self.crash_on_save is not None:
            self.crash_on_save -= 1
            if self.crash_on_save == 0:
                raise Crash("after a record save")


@attrs.define
class Script:
    """What each scenario's rollouts do: latency in turns, rewards, failures."""

    latencies: Sequence[int] = (0,)
    group_size: int = 3
    zero_variance_every: int = 0  # every k-th scenario has equal rewards (0: never)
    failing: frozenset[int] = frozenset()  # scenarios whose rollouts all raise
    sampled: Counter[int] = attrs.Factory(Counter)  # rollouts started, per scenario

    def rollout_fn(self) -> RolloutFn[TrainableModel, int, Any]:
        counter = itertools.count()

        async def single(model: TrainableModel, scenario: int, config: Any) -> Trajectory:
            position = next(counter)
            served = int(model.get_inference_name().rsplit("@", 1)[1])
            self.sampled[scenario] += 1
            await turns(self.latencies[position % len(self.latencies)])
            if scenario in self.failing:
                raise RuntimeError(f"rollout of scenario {scenario} failed")
            equal = self.zero_variance_every and scenario % self.zero_variance_every == 0
            reward = 1.0 if equal else float(position % self.group_size)
            choice = make_choice("ab", token_ids=[10 + scenario % 40, 11], logprobs=-0.7)
            return Trajectory(
                messages_and_choices=[{"role": "user", "content": f"s{scenario}"}, choice],
                reward=reward,
                metadata={SERVED_KEY: served},
            )

        return make_group_rollout_fn(single, self.group_size)


@attrs.define
class World:
    """The ports of one run; they outlive the trainers and models a crash throws away."""

    backend: TurnsBackend = attrs.Factory(TurnsBackend)
    store: CrashingStore = attrs.Factory(CrashingStore)
    history: CrashingHistory = attrs.Factory(CrashingHistory)
    state: CrashingState = attrs.Factory(CrashingState)

    def model(self) -> TrainableModel:
        return TrainableModel(
            name=RUN.name,
            project=RUN.project,
            base_model="in-memory",
            store=self.store,
            history=self.history,
        )

    def trainer(
        self, script: Script, scenarios: Sequence[Any], **options: Any
    ) -> PipelineTrainer[TrainableModel, Any, Any]:
        model = self.model()
        return PipelineTrainer(
            model,
            self.backend,
            script.rollout_fn(),
            list(scenarios),
            None,
            state_store=self.state,
            **{"learning_rate": 1e-2, **options},
        )

    def disarm(self) -> None:
        self.backend.crash_after_checkpoint = None
        self.store.crash_on_train_write = None
        self.history.crash_on = None
        self.state.crash_on_save = None


def run_until_done(
    world: World, make: Callable[[], PipelineTrainer[TrainableModel, Any, Any]], attempts: int = 20
) -> int:
    """Run trainers until one finishes without a Crash; the number of crashes."""

    async def main() -> int:
        for crashes in range(attempts):
            try:
                await make().train()
            except Crash:
                continue
            return crashes
        raise AssertionError(f"no run finished in {attempts} attempts")

    return asyncio.run(main())


def check_run(world: World, scenarios: int, bound: int | None, *, finished: bool = True) -> Outcome:
    """Every exactly-once and staleness rule (see tests/_pipeline_checks.py)."""
    steps = asyncio.run(world.backend.get_step(RUN))
    return asyncio.run(
        check_pipeline_run(
            RUN,
            store=world.store,
            history=world.history,
            state=world.state,
            steps=steps,
            scenarios=scenarios,
            bound=bound,
            finished=finished,
        )
    )
