"""The rollout side of the pipeline: workers that take scenarios, wait for a fresh enough
policy, run `rollout_fn` and queue the group; and the gate that decides when a rollout may
start, from the step served and the groups already admitted for the updates to come."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import attrs

from ..config import TrainConfig
from ..errors import InvalidInputError
from ..trainable import TrainableModel
from ..trajectories import TrajectoryGroup
from ..validation import check_training_groups
from ..watchdog import WATCHDOG
from .measures import (
    FINAL_STEP_KEY,
    INITIAL_STEP_KEY,
    STREAM_INDEX_KEY,
    RolloutClock,
    group_tokens,
)
from .rollouts import RolloutFn
from .stream import ScenarioStream


@attrs.frozen
class Sampled:
    index: int
    group: TrajectoryGroup
    tokens: int


@attrs.frozen
class Failed:
    """A scenario whose rollout_fn raised, or whose rollouts all failed."""

    index: int
    sampled: int
    error: str


END = object()  # queued once every worker is done: the stream is exhausted


class StepGate:
    """The step served (`step`), the step the next update trains from (`training_to`: one
    more while an update runs), and the groups admitted per sampled step that have not yet
    left the batches to come. Workers wait here until a rollout started now would be young
    enough for the update it will join."""

    def __init__(self, step: int, bound: int | None, batch: int, stop: asyncio.Event) -> None:
        self.step = self.training_to = step
        self._bound = bound
        self._batch = batch
        self._stop = stop
        self._admitted: Counter[int] = Counter()
        self._changed = asyncio.Condition()

    def fresh_enough(self) -> bool:
        """ART waits only while the served step is already too old for the next update. But a
        group started while the batches it could join are already spoken for waits in the
        queue for a later update and goes stale there (with `max_steps_off_policy=0`, every
        group started between a batch being collected and its update ending). So a rollout
        starts only if the update it would join is within the bound of the served step,
        counting the groups admitted ahead of it in batches of `max_batch_size`: those in
        flight, queued or collected and still young enough to be trained. Groups already too
        old to train will be discarded and take no place, so a straggler never holds the
        others back. Discards make this an estimate; the bound itself is enforced when a
        batch is collected."""
        bound = self._bound
        if self._stop.is_set() or bound is None:
            return True
        ahead = sum(n for step, n in self._admitted.items() if step >= self.training_to - bound)
        joins = self.training_to + ahead // self._batch
        return joins - self.step <= bound

    async def admit(self) -> int:
        """Wait until a rollout may start; the step it samples from."""
        async with self._changed:
            await self._changed.wait_for(self.fresh_enough)
            self._admitted[self.step] += 1
            return self.step

    async def release(self, sampled: list[int]) -> None:
        """Admitted groups left the batches to come (discarded, or their update started)."""
        async with self._changed:
            self._admitted.subtract(sampled)
            for step in sampled:
                if self._admitted[step] <= 0:
                    del self._admitted[step]
            self._changed.notify_all()

    async def update_started(self, step: int, batch: list[int]) -> None:
        async with self._changed:
            self.training_to = step + 1
        await self.release(batch)

    async def update_done(self, step: int) -> None:
        async with self._changed:
            self.step = self.training_to = step
            self._changed.notify_all()


@attrs.define
class RolloutWorkers:
    """`count` workers over one stream, feeding one queue. `pending` is the pipeline's set of
    scenarios taken and not yet trained or discarded: a worker adds each index it takes."""

    model: TrainableModel
    rollout_fn: RolloutFn[Any, Any, Any]
    config: Any
    train_config: TrainConfig
    stream: ScenarioStream[Any]
    queue: asyncio.Queue[Any]
    gate: StepGate
    pending: set[int]
    stop: asyncio.Event
    count: int
    clock: RolloutClock = attrs.Factory(RolloutClock)
    in_use: Counter[int] = attrs.Factory(Counter)  # sampled step -> rollouts running on it

    async def run(self) -> None:
        async with asyncio.TaskGroup() as workers:
            for number in range(self.count):
                workers.create_task(self._work(), name=f"pipeline-worker-{number}")
        await self.queue.put(END)

    async def _work(self) -> None:
        while not self.stop.is_set():
            taken = await self.stream.next()
            if taken is None:
                return
            index, scenario = taken
            self.pending.add(index)
            waited = time.monotonic()
            sampled = await self.gate.admit()
            idle_s = time.monotonic() - waited
            self.in_use[sampled] += 1
            started = time.monotonic()
            outcome: Sampled | Failed
            try:
                with WATCHDOG.activity("rollout"):
                    group = await self.rollout_fn(self.model, scenario, self.config)
            except Exception as error:  # a failing rollout is counted, not fatal (see collect)
                outcome = Failed(index, sampled, f"{type(error).__name__}: {error}")
            else:  # a group that cannot be trained is the caller's bug: fatal, at once
                outcome = self._stamp(index, scenario, group, sampled)
            finally:
                self.in_use[sampled] -= 1
            rollout_s = time.monotonic() - started
            put = time.monotonic()
            await self.queue.put(outcome)
            put_s = time.monotonic() - put
            clock = self.clock
            clock.rollout_s += rollout_s
            clock.idle_s += idle_s + put_s
            clock.put_wait_s += put_s
            clock.tokens += outcome.tokens if isinstance(outcome, Sampled) else 0

    def _stamp(self, index: int, scenario: Any, group: Any, sampled: int) -> Sampled | Failed:
        if not isinstance(group, TrajectoryGroup):
            raise InvalidInputError(
                f"rollout_fn returned {type(group).__name__} for scenario {index}; it must return "
                "a TrajectoryGroup (make_group_rollout_fn builds one from single rollouts)"
            )
        if not group.trajectories:
            first = group.exceptions[0] if group.exceptions else None
            return Failed(
                index, sampled, f"{first.type}: {first.message}" if first else "no rollouts"
            )
        check_training_groups([group], self.train_config)  # a Choice without logprobs: fail now
        metadata = scenario.get("metadata") if isinstance(scenario, Mapping) else None
        if isinstance(metadata, Mapping):  # as ART: scenario_id, and scenario_{key} for others
            for key, value in metadata.items():
                if isinstance(key, str) and (value is None or isinstance(value, str | int | float)):
                    group.metadata[key if key == "scenario_id" else f"scenario_{key}"] = value
        group.metadata[STREAM_INDEX_KEY] = index
        group.metadata[INITIAL_STEP_KEY] = sampled
        group.metadata[FINAL_STEP_KEY] = self.gate.step
        return Sampled(index, group, group_tokens([group]))
