"""PipelineTrainer on the in-memory ports: exactly once, bounded staleness, metrics, resume.

Latencies are event-loop turns (see _pipeline_world.py), so these tests are fast and the same
on every run; the real-process kill test is tests/faults/test_pipeline_kill.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from arthex.core.errors import (
    InvalidInputError,
    TooManyExceptionsError,
    UnsupportedCapability,
)
from arthex.core.pipeline import PipelineTrainer, make_group_rollout_fn
from arthex.core.pipeline.measures import INITIAL_STEP_KEY, STREAM_INDEX_KEY
from arthex.core.trainable import TrainableModel
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.testing.builders import make_choice

from ._pipeline_world import (
    RUN,
    Crash,
    Script,
    TurnsBackend,
    World,
    check_run,
    run_until_done,
)

ART_NAMES = (
    "offpolicy/token_weighted_policy_age_steps",
    "offpolicy/token_weighted_policy_age_p95_steps",
    "discarded/step/stale_groups",
    "discarded/step/zero_variance_groups",
    "discarded/cum/stale_groups",
    "discarded/cum/zero_variance_groups",
    "discarded/rate/stale_groups",
    "discarded/rate/zero_variance_groups",
    "queue/actual_stale_fraction",
    "time/step_wall_s",
    "time/step_collect_batch_s",
    "time/step_backend_train_s",
    "time/step_rollout_idle_s",
    "time/step_trainer_idle_ratio",
    "time/step_rollout_idle_ratio",
    "throughput/accepted_train_tok_per_s",
    "throughput/avg_trainer_tok_per_s",
    "throughput/avg_rollout_tok_per_s",
)


def rows_at(world: World, key: str) -> list[dict[str, float | None]]:
    rows = asyncio.run(world.history.rows(RUN))
    return [dict(r.values) for r in rows if key in r.values]


def test_every_scenario_is_trained_once_or_discarded_by_the_end_of_the_stream() -> None:
    world = World(backend=_backend(train_turns=30))
    script = Script(latencies=(1, 2, 40, 3), zero_variance_every=5)
    run_until_done(
        world, lambda: world.trainer(script, range(40), min_batch_size=3, max_batch_size=4)
    )
    outcome = check_run(world, 40, bound=4)
    assert outcome.steps >= 5
    equal = set(range(0, 40, 5))
    assert set(outcome.record.discarded["zero_variance"]) <= equal <= outcome.discarded
    assert all(script.sampled[i] == script.group_size for i in range(40)), "sampled once each"


def test_a_straggler_that_outlives_the_bound_is_discarded_as_stale_not_trained() -> None:
    world = World(backend=_backend(train_turns=20))
    script = Script(latencies=(0, 0, 0, 0, 0, 300))
    run_until_done(
        world,
        lambda: world.trainer(
            script, range(60), min_batch_size=2, max_batch_size=2, max_steps_off_policy=1
        ),
    )
    outcome = check_run(world, 60, bound=1)
    assert outcome.record.discarded["stale"], "rollouts of 300 turns outlive two updates"
    counted = rows_at(world, "discarded/step/stale_groups")
    assert sum(r["discarded/step/stale_groups"] or 0 for r in counted) <= len(
        outcome.record.discarded["stale"]
    )
    fractions = [r["queue/actual_stale_fraction"] or 0.0 for r in counted]
    assert max(fractions) > 0.0


def test_with_no_steps_off_policy_every_group_trains_on_the_step_that_sampled_it() -> None:
    world = World(backend=_backend(train_turns=50))
    script = Script(latencies=(0, 5, 9))
    run_until_done(
        world,
        lambda: world.trainer(
            script,
            range(24),
            num_rollout_workers=4,
            min_batch_size=4,
            max_batch_size=4,
            max_steps_off_policy=0,
        ),
    )
    outcome = check_run(world, 24, bound=0)
    ages = rows_at(world, "offpolicy/token_weighted_policy_age_steps")
    assert all(r["offpolicy/token_weighted_policy_age_steps"] == 0.0 for r in ages)
    assert outcome.steps == 6 and not outcome.discarded, "as many workers as a batch: no waste"


def test_each_step_has_one_pipeline_row_with_arts_metric_names() -> None:
    world = World(backend=_backend(train_turns=20))
    run_until_done(world, lambda: world.trainer(Script(latencies=(1, 7)), range(16)))
    rows = rows_at(world, "discarded/cum/stale_groups")
    assert rows
    for row in rows:
        missing = [name for name in ART_NAMES if name not in row]
        assert not missing, f"pipeline row lacks {missing}"
        assert not any(key.startswith("train/") for key in row), "names are not split-prefixed"
        assert 0.0 <= (row["time/step_trainer_idle_ratio"] or 0.0) <= 1.0


def test_failed_and_equal_reward_scenarios_are_discarded_and_counted() -> None:
    world = World()
    script = Script(zero_variance_every=4, failing=frozenset({3, 10, 11}))
    run_until_done(world, lambda: world.trainer(script, range(20), min_batch_size=2))
    outcome = check_run(world, 20, bound=4)
    assert outcome.record.discarded["errored"] == (3, 10, 11)
    assert outcome.record.discarded["zero_variance"] == (0, 4, 8, 12, 16)


def test_too_many_failed_scenarios_in_a_row_stop_the_run_and_stay_to_be_sampled_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World()
    script = Script(failing=frozenset(range(4, 40)))
    caplog.set_level(logging.ERROR)
    with pytest.raises(TooManyExceptionsError, match="rollout of scenario"):
        asyncio.run(world.trainer(script, range(40), min_batch_size=2, max_batch_size=4).train())
    record = asyncio.run(world.state.load(RUN))
    assert record is not None and not record.discarded["errored"], "failures are not recorded"
    script.failing = frozenset()
    run_until_done(world, lambda: world.trainer(script, range(40), min_batch_size=2))
    outcome = check_run(world, 40, bound=4)
    assert not outcome.discarded


CRASH_POINTS = {
    # (case settled on resume) where the process dies
    "intent-saved": lambda w: setattr(w.state, "crash_on_save", 2),  # never logged: resample
    "groups-stored": lambda w: setattr(w.store, "crash_on_train_write", 2),  # logged: train them
    "train-row-written": lambda w: setattr(w.history, "crash_on", ("data/step_num_scenarios", 2)),
    "checkpoint-saved": lambda w: setattr(w.backend, "crash_after_checkpoint", 2),  # trained
    "training-row-written": lambda w: setattr(
        w.history, "crash_on", ("data/step_num_gradient_steps", 2)
    ),
    "pipeline-row-written": lambda w: setattr(
        w.history, "crash_on", ("discarded/cum/stale_groups", 2)
    ),
    "update-committed": lambda w: setattr(w.state, "crash_on_save", 3),
}


@pytest.mark.parametrize("point", sorted(CRASH_POINTS))
def test_a_crash_at_any_point_of_an_update_leaves_every_scenario_trained_once(point: str) -> None:
    world = World(backend=_backend(train_turns=10))
    script = Script(latencies=(0, 3, 11))
    CRASH_POINTS[point](world)
    crashes = run_until_done(
        world,
        disarmed_after_first(
            world, lambda: world.trainer(script, range(30), min_batch_size=3, max_batch_size=3)
        ),
    )
    assert crashes == 1
    outcome = check_run(world, 30, bound=4)
    if point in ("groups-stored", "train-row-written"):
        # the update from step 1 was logged before the crash: it is trained from the store,
        # so its scenarios were not sampled again
        for group in asyncio.run(world.store.read(RUN, "train", 1)):
            index = group.metadata[STREAM_INDEX_KEY]
            assert isinstance(index, int) and script.sampled[index] == script.group_size
    assert sum(outcome.trained.values()) + len(outcome.discarded) == 30


def test_a_crash_right_after_a_resume_starts_loses_no_pending_scenario() -> None:
    world = World(backend=_backend(train_turns=10))
    script = Script(latencies=(0, 25))
    world.state.crash_on_save = 4  # mid-run, with rollouts in flight and groups queued
    arms = [lambda: setattr(world.state, "crash_on_save", 1), world.disarm]  # then at the start

    def make() -> PipelineTrainer[TrainableModel, Any, Any]:
        trainer = world.trainer(script, range(30), min_batch_size=2, max_batch_size=2)
        if arms:
            world.disarm()
            arms.pop(0)()
        return trainer

    first = world.trainer(script, range(30), min_batch_size=2, max_batch_size=2)
    try:
        asyncio.run(first.train())
    except Crash:
        pass
    pending = asyncio.run(world.state.load(RUN))
    assert pending is not None and pending.pending, "the crash left scenarios pending"
    assert run_until_done(world, make) == 1
    check_run(world, 30, bound=4)


def disarmed_after_first(
    world: World, make: Callable[[], PipelineTrainer[TrainableModel, Any, Any]]
) -> Callable[[], PipelineTrainer[TrainableModel, Any, Any]]:
    """`make`, with the world's crash points disarmed from the second trainer on."""
    made = [0]

    def again() -> PipelineTrainer[TrainableModel, Any, Any]:
        if made[0]:
            world.disarm()
        made[0] += 1
        return make()

    return again


def test_max_steps_counts_from_the_call_and_a_resume_after_a_crash_keeps_the_same_end() -> None:
    world = World()
    script = Script()
    world.store.crash_on_train_write = 3
    make = disarmed_after_first(
        world,
        lambda: world.trainer(script, range(100), min_batch_size=2, max_batch_size=2, max_steps=5),
    )
    assert run_until_done(world, make) == 1
    assert asyncio.run(world.backend.get_step(RUN)) == 5
    check_run(world, 100, bound=4, finished=False)
    run_until_done(
        world,
        lambda: world.trainer(script, range(100), min_batch_size=2, max_batch_size=2, max_steps=3),
    )
    assert asyncio.run(world.backend.get_step(RUN)) == 8, "a finished leg: the next starts anew"
    outcome = check_run(world, 100, bound=4, finished=False)
    pending = set(outcome.record.pending)
    untaken = set(range(outcome.record.offset, 100))
    assert set(outcome.trained) | outcome.discarded | pending | untaken == set(range(100))


def test_a_resume_samples_the_pending_scenarios_first() -> None:
    world = World(backend=_backend(train_turns=5))
    script = Script(latencies=(0, 30))
    asyncio.run(world.trainer(script, range(50), min_batch_size=2, max_steps=2).train())
    first = asyncio.run(world.state.load(RUN))
    assert first is not None and first.pending, "groups were in flight when the leg ended"
    order: list[int] = []
    replay = Script()
    inner = replay.rollout_fn()

    async def watch(model: TrainableModel, scenario: int, config: Any) -> TrajectoryGroup:
        order.append(scenario)
        return await inner(model, scenario, config)

    trainer = world.trainer(replay, range(50), min_batch_size=2, max_steps=1)
    trainer.rollout_fn = watch
    asyncio.run(trainer.train())
    assert order[: len(first.pending)] == list(first.pending)
    check_run(world, 50, bound=4, finished=False)


def test_request_stop_ends_the_run_after_the_update_in_progress() -> None:
    world = World(backend=_backend(train_turns=3))
    script = Script()

    async def main() -> None:
        trainer = world.trainer(script, range(1000), min_batch_size=2)
        original = trainer.on_step

        def stop_at_three(step: int, metrics: Any) -> None:
            if step == 3:
                trainer.request_stop()
            if original is not None:
                original(step, metrics)

        trainer.on_step = stop_at_three
        await trainer.train()

    asyncio.run(main())
    assert asyncio.run(world.backend.get_step(RUN)) == 3
    check_run(world, 1000, bound=4, finished=False)


def test_a_rollout_that_returns_no_group_fails_fast_and_trains_nothing() -> None:
    world = World()

    async def wrong(model: TrainableModel, scenario: int, config: Any) -> Any:
        return [Trajectory(reward=1.0)]

    trainer = world.trainer(Script(), range(10))
    trainer.rollout_fn = wrong
    with pytest.raises(InvalidInputError, match="must return a TrajectoryGroup"):
        asyncio.run(trainer.train())
    assert asyncio.run(world.backend.get_step(RUN)) == 0


def test_choices_without_logprobs_are_refused_before_any_update() -> None:
    world = World()

    async def no_logprobs(model: TrainableModel, scenario: int, config: Any) -> Trajectory:
        choice = make_choice("x", logprobs=None)
        return Trajectory(messages_and_choices=[choice], reward=float(scenario))

    trainer = world.trainer(Script(), range(10))
    trainer.rollout_fn = make_group_rollout_fn(no_logprobs, 2)
    with pytest.raises(InvalidInputError, match="no token logprobs"):
        asyncio.run(trainer.train())
    assert asyncio.run(world.backend.get_step(RUN)) == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_batch_size": 0}, "min_batch_size"),
        ({"min_batch_size": 4, "max_batch_size": 2}, "max_batch_size"),
        ({"max_steps_off_policy": -1}, "max_steps_off_policy"),
        ({"num_rollout_workers": 0}, "num_rollout_workers"),
        ({"loss_fn": "dpo"}, "loss_fn"),
        ({"learning_rate": -1.0}, "learning_rate"),
        ({"checkpoint_retention": -2}, "checkpoint_retention"),
    ],
)
def test_bad_options_are_refused_with_their_name(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        World().trainer(Script(), range(3), **options)


def test_a_loss_the_backend_lacks_is_refused_before_anything_is_written() -> None:
    world = World()
    world.backend = _backend()
    world.backend._losses = frozenset({"ppo"})
    with pytest.raises(UnsupportedCapability, match="cispo"):
        asyncio.run(world.trainer(Script(), range(4)).train())
    assert asyncio.run(world.state.load(RUN)) is None
    assert RUN not in world.store.model_specs, "refused before the model was registered"


def test_a_shorter_stream_on_resume_is_refused_naming_the_missing_scenarios() -> None:
    world = World(backend=_backend(train_turns=5))
    asyncio.run(world.trainer(Script(latencies=(0, 30)), range(50), max_steps=2).train())
    with pytest.raises(InvalidInputError, match="same scenario stream"):
        asyncio.run(world.trainer(Script(), range(3)).train())


def test_make_group_rollout_fn_runs_n_rollouts_and_keeps_failures_in_order() -> None:
    calls: list[int] = []

    async def single(model: Any, scenario: int, config: Any) -> Trajectory:
        calls.append(scenario)
        if len(calls) == 2:
            raise ValueError("second rollout failed")
        return Trajectory(reward=float(len(calls)))

    rollout = make_group_rollout_fn(single, 3)

    async def one_group() -> TrajectoryGroup:
        return await rollout(World().model(), 7, None)

    group = asyncio.run(one_group())
    assert calls == [7, 7, 7]
    assert [t.reward for t in group.trajectories] == [1.0, 3.0]
    assert [e.message for e in group.exceptions] == ["second rollout failed"]
    with pytest.raises(InvalidInputError, match="n must be"):
        make_group_rollout_fn(single, 0)


def test_groups_carry_their_scenario_index_and_sampled_step() -> None:
    world = World(backend=_backend(train_turns=8))
    scenarios = [{"metadata": {"scenario_id": f"s{i}", "epoch": 1}} for i in range(12)]

    script = Script()
    trainer = world.trainer(script, scenarios, min_batch_size=2)

    async def tagged(model: Any, scenario: dict[str, Any], config: Any) -> TrajectoryGroup:
        index = int(str(scenario["metadata"]["scenario_id"])[1:])
        return await script.rollout_fn()(model, index, config)

    trainer.rollout_fn = tagged
    asyncio.run(trainer.train())
    groups = asyncio.run(world.store.read(RUN, "train", 0))
    assert groups
    for group in groups:
        index = group.metadata[STREAM_INDEX_KEY]
        assert group.metadata["scenario_id"] == f"s{index}"
        assert group.metadata["scenario_epoch"] == 1
        assert group.metadata[INITIAL_STEP_KEY] == 0


def _backend(train_turns: int = 0) -> TurnsBackend:
    return TurnsBackend(train_turns)
