"""The pipeline's parts one by one: the scenario stream, the rollout workers and the batch
collector, each driven directly on a real asyncio queue and a real StepGate.

What a worker queues is what the collector reads (a `Sampled` group, a `Failed` scenario, and
`END`), so the tests read the queue. Time is a stand-in clock that moves only when a rollout,
the gate or the queue says so: the expected seconds are worked out by hand, not measured.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from arthex.core.config import TrainConfig
from arthex.core.errors import InvalidInputError, TooManyExceptionsError
from arthex.core.pipeline import workers as workers_module
from arthex.core.pipeline.batch_collector import BatchCollector
from arthex.core.pipeline.measures import FINAL_STEP_KEY, INITIAL_STEP_KEY, STREAM_INDEX_KEY
from arthex.core.pipeline.stream import ScenarioStream
from arthex.core.pipeline.workers import END, Failed, RolloutWorkers, Sampled, StepGate
from arthex.core.pipeline_record import DISCARD_REASONS
from arthex.core.trainable import TrainableModel
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.testing.builders import make_choice

from ._pipeline_world import World


def trajectory(reward: float, tokens: int = 3) -> Trajectory:
    choice = make_choice("abc", token_ids=list(range(1, tokens + 1)), logprobs=-0.5)
    return Trajectory(
        messages_and_choices=[{"role": "user", "content": "q"}, choice], reward=reward
    )


def group(*rewards: float, sampled: int | None = None) -> TrajectoryGroup:
    made = TrajectoryGroup([trajectory(r) for r in rewards])
    if sampled is not None:
        made.metadata[INITIAL_STEP_KEY] = sampled
    return made


def model() -> TrainableModel:
    return World().model()


def workers(
    rollout_fn: Any,
    scenarios: list[Any],
    *,
    count: int = 1,
    gate: StepGate | None = None,
    queue: asyncio.Queue[Any] | None = None,
    config: Any = None,
) -> RolloutWorkers:
    stop = asyncio.Event()
    return RolloutWorkers(
        model=model(),
        rollout_fn=rollout_fn,
        config=config,
        train_config=TrainConfig(),
        stream=ScenarioStream(scenarios),
        queue=queue if queue is not None else asyncio.Queue(),
        gate=gate if gate is not None else StepGate(0, None, 1, stop),
        pending=set(),
        stop=stop,
        count=count,
    )


def drained(queue: asyncio.Queue[Any]) -> list[Any]:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


# --- the rollout workers --------------------------------------------------------------------


def test_a_raising_rollout_is_queued_as_a_failure_naming_its_scenario_step_and_error() -> None:
    seen_configs: list[Any] = []
    settings = {"temperature": 0.5}

    async def rollout(model: TrainableModel, scenario: int, config: Any) -> TrajectoryGroup:
        seen_configs.append(config)
        if scenario == 1:
            raise ValueError("the environment broke")
        return group(0.0, 1.0)

    async def run() -> list[Any]:
        pool = workers(rollout, [0, 1], gate=StepGate(4, None, 1, asyncio.Event()), config=settings)
        await pool.run()
        assert pool.pending == {0, 1}
        return drained(pool.queue)

    first, second, end = asyncio.run(run())
    assert isinstance(first, Sampled) and first.index == 0
    assert second == Failed(1, 4, "ValueError: the environment broke")
    assert end is END
    assert seen_configs == [settings, settings]


def test_a_group_without_trajectories_fails_with_its_first_error_or_as_no_rollouts() -> None:
    async def rollout(model: TrainableModel, scenario: int, config: Any) -> TrajectoryGroup:
        if scenario == 0:
            return TrajectoryGroup(exceptions=[ValueError("first"), KeyError("second")])
        return TrajectoryGroup([])

    async def run() -> list[Any]:
        pool = workers(rollout, [0, 1], gate=StepGate(2, None, 1, asyncio.Event()))
        await pool.run()
        return drained(pool.queue)

    assert asyncio.run(run()) == [
        Failed(0, 2, "ValueError: first"),
        Failed(1, 2, "no rollouts"),
        END,
    ]


def test_a_rollout_that_returns_no_group_is_refused_naming_what_it_returned() -> None:
    async def rollout(model: TrainableModel, scenario: str, config: Any) -> Any:
        return group(0.0, 1.0) if scenario == "first" else {"reward": 1.0}

    with pytest.raises(ExceptionGroup) as raised:
        asyncio.run(workers(rollout, ["first", "second"]).run())
    assert raised.group_contains(InvalidInputError, match="rollout_fn returned dict for scenario 1")


def test_scenario_metadata_of_plain_values_is_copied_under_arts_names() -> None:
    scenario = {
        "metadata": {"scenario_id": "s7", "epoch": 2, "weight": 0.5, "note": None, "tags": ["a"]}
    }
    scenario["metadata"][3] = "not a name"  # type: ignore[index]

    async def rollout(model: TrainableModel, scenario: Any, config: Any) -> TrajectoryGroup:
        return group(0.0, 1.0)

    async def run() -> Any:
        pool = workers(rollout, [scenario])
        await pool.run()
        return pool.queue.get_nowait()

    sampled = asyncio.run(run())
    assert sampled.group.metadata == {
        "scenario_id": "s7",
        "scenario_epoch": 2,
        "scenario_weight": 0.5,
        "scenario_note": None,
        STREAM_INDEX_KEY: 0,
        INITIAL_STEP_KEY: 0,
        FINAL_STEP_KEY: 0,
    }


def test_a_group_records_the_step_served_when_it_started_and_when_it_ended() -> None:
    gate = StepGate(0, None, 1, asyncio.Event())

    async def rollout(model: TrainableModel, scenario: int, config: Any) -> TrajectoryGroup:
        await gate.update_done(3)  # three updates land while this rollout runs
        return group(0.0, 1.0)

    async def run() -> Any:
        pool = workers(rollout, [0], gate=gate)
        await pool.run()
        return pool.queue.get_nowait()

    metadata = asyncio.run(run()).group.metadata
    assert (metadata[INITIAL_STEP_KEY], metadata[FINAL_STEP_KEY]) == (0, 3)


def test_rollouts_running_on_a_step_are_counted_until_each_of_them_ends() -> None:
    """The count is what keeps a step's checkpoint from retention while it is sampled."""
    seen: list[int] = []

    async def run() -> RolloutWorkers:
        both_running = asyncio.Barrier(2)

        async def rollout(model: TrainableModel, scenario: int, config: Any) -> TrajectoryGroup:
            await both_running.wait()
            seen.append(pool.in_use[0])
            if scenario == 1:
                await pool.queue.get()  # the other rollout has ended and queued its group
                seen.append(pool.in_use[0])
            return group(0.0, 1.0)

        pool = workers(rollout, [0, 1], count=2)
        await pool.run()
        return pool

    pool = asyncio.run(run())
    assert seen == [2, 2, 1]
    assert pool.in_use[0] == 0


class Clock:
    """Stands in for `time`: moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class SlowGate(StepGate):
    """A gate where every admission waits 5 s."""

    clock: Clock

    async def admit(self) -> int:
        self.clock.now += 5.0
        return await super().admit()


class SlowQueue(asyncio.Queue[Any]):
    """A queue where every put waits 3 s for room."""

    clock: Clock

    async def put(self, item: Any) -> None:
        self.clock.now += 3.0
        await super().put(item)


def test_the_clock_sums_rollout_seconds_waits_and_sampled_tokens_over_all_scenarios(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    monkeypatch.setattr(workers_module, "time", clock)
    seconds = {0: 2.0, 1: 4.0, 2: 1.0}

    async def rollout(model: TrainableModel, scenario: int, config: Any) -> TrajectoryGroup:
        clock.now += seconds[scenario]
        if scenario == 2:
            raise RuntimeError("lost")
        return TrajectoryGroup([trajectory(0.0, tokens=3), trajectory(1.0, tokens=4)])

    async def run() -> RolloutWorkers:
        gate = SlowGate(0, None, 1, asyncio.Event())
        gate.clock = clock
        queue = SlowQueue()
        queue.clock = clock
        pool = workers(rollout, [0, 1, 2], gate=gate, queue=queue)
        await pool.run()
        return pool

    measured = asyncio.run(run()).clock
    assert measured.rollout_s == 2.0 + 4.0 + 1.0
    assert measured.idle_s == 3 * (5.0 + 3.0)  # the gate's wait and the queue's, per scenario
    assert measured.put_wait_s == 3 * 3.0
    assert measured.tokens == 2 * (3 + 4)  # the failed scenario sampled nothing


# --- the scenario stream --------------------------------------------------------------------


def test_an_async_stream_numbers_each_scenario_by_position_then_ends() -> None:
    async def scenarios() -> AsyncIterator[str]:
        yield "a"
        yield "b"

    async def read() -> list[Any]:
        stream = ScenarioStream(scenarios())
        return [await stream.next() for _ in range(4)]

    assert asyncio.run(read()) == [(0, "a"), (1, "b"), None, None]


class ResumingIterator(Iterator[str]):
    """An iterator that says it has ended, then yields again (a queue refilled later)."""

    def __init__(self) -> None:
        self.reads = 0

    def __next__(self) -> str:
        self.reads += 1
        if self.reads == 2:
            raise StopIteration
        return f"read {self.reads}"


def test_a_stream_that_has_ended_stays_ended_and_is_not_read_again() -> None:
    source = ResumingIterator()

    async def read() -> list[Any]:
        stream = ScenarioStream(source)
        return [await stream.next() for _ in range(3)]

    assert asyncio.run(read()) == [(0, "read 1"), None, None]
    assert source.reads == 2


def test_a_resumed_stream_shorter_than_the_record_warns_with_both_counts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="arthex"):
        asyncio.run(ScenarioStream(["a", "b", "c"]).start(5, []))
    [record] = caplog.records
    message = record.getMessage()
    assert "ended after 3 scenarios" in message and "had taken 5" in message


def test_a_resumed_stream_exactly_as_long_as_the_record_gives_no_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def resume() -> list[Any]:
        stream = ScenarioStream(["a", "b", "c"])
        await stream.start(3, [1])
        return [await stream.next(), await stream.next()]

    with caplog.at_level(logging.WARNING, logger="arthex"):
        assert asyncio.run(resume()) == [(1, "b"), None]
    assert caplog.records == []


def test_missing_pending_scenarios_are_named_five_at_most_with_the_way_to_start_over() -> None:
    with pytest.raises(InvalidInputError) as raised:
        asyncio.run(ScenarioStream(["a", "b"]).start(10, range(2, 10)))
    assert "scenarios [2, 3, 4, 5, 6] were taken" in str(raised.value)
    assert "(resume=False starts over)" in str(raised.value)


# --- the batch collector --------------------------------------------------------------------


def collector(
    items: list[Any], *, min_batch: int = 1, max_batch: int = 4, bound: int | None = None
) -> BatchCollector:
    queue: asyncio.Queue[Any] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)
    stop = asyncio.Event()
    return BatchCollector(
        queue=queue,
        gate=StepGate(0, bound, max_batch, stop),
        pending={i.index for i in items if isinstance(i, Sampled | Failed)},
        discarded={"errored": set(), "stale": set(), "zero_variance": set()},
        stop=stop,
        bound=bound,
        min_batch=min_batch,
        max_batch=max_batch,
    )


def good(index: int, sampled: int = 0) -> Sampled:
    return Sampled(index, group(float(index), index + 1.0, sampled=sampled), 6)


def test_a_batch_holds_at_most_max_batch_groups_however_many_are_queued() -> None:
    taker = collector([good(0), good(1), good(2)], max_batch=2)
    batch, _, ended = asyncio.run(taker.collect(0))
    assert [g.trajectories[0].reward for g in batch] == [0.0, 1.0]
    assert not ended
    assert taker.queue.qsize() == 1


def test_once_min_batch_is_reached_a_batch_takes_what_is_queued_and_waits_for_no_more() -> None:
    taker = collector([good(0)], min_batch=1, max_batch=3)

    async def collect() -> list[TrajectoryGroup]:
        # a group that arrives only once the collector waits
        asyncio.get_running_loop().call_soon(taker.queue.put_nowait, good(1))
        batch, _, _ = await taker.collect(0)
        return batch

    assert len(asyncio.run(collect())) == 1


def test_discards_are_counted_per_reason_and_move_from_pending_to_discarded() -> None:
    items = [
        Failed(0, 0, "ValueError: a"),
        good(1, sampled=2),
        Failed(2, 0, "ValueError: b"),
        Sampled(3, group(1.0, 1.0, sampled=3), 6),
        Sampled(4, group(2.0, 2.0, sampled=3), 6),
        good(5, sampled=1),  # two steps behind the update from step 3, with a bound of 1
        good(6, sampled=3),
        END,
    ]
    taker = collector(items, max_batch=8, bound=1)
    batch, counts, ended = asyncio.run(taker.collect(3))
    assert [g.trajectories[0].reward for g in batch] == [1.0, 6.0]
    assert counts == {"errored": 2, "stale": 1, "zero_variance": 2}
    assert ended
    assert taker.discarded == {"errored": {0, 2}, "stale": {5}, "zero_variance": {3, 4}}
    assert taker.pending == {1, 6}


def test_a_stop_request_ends_the_batch_without_taking_what_is_queued() -> None:
    taker = collector([good(0), good(1)])
    taker.stop.set()
    assert asyncio.run(taker.collect(0)) == ([], dict.fromkeys(DISCARD_REASONS, 0), False)
    assert taker.queue.qsize() == 2


def test_max_batch_failed_scenarios_in_a_row_raise_naming_the_first_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    taker = collector(
        [Failed(0, 0, "ValueError: a"), Failed(1, 0, "KeyError: b"), good(2)], max_batch=2
    )
    with (
        caplog.at_level(logging.WARNING, logger="arthex"),
        pytest.raises(TooManyExceptionsError) as raised,
    ):
        asyncio.run(taker.collect(0))
    assert "the rollouts of 2 scenarios in a row failed; first: ValueError: a." in str(raised.value)
    logged = [r.getMessage() for r in caplog.records]
    assert [("scenario 0" in m, "ValueError: a" in m) for m in logged[:1]] == [(True, True)]
    assert "KeyError: b" in logged[1]
