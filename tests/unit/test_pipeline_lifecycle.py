"""A pipeline run from start to resume: what is refused before anything is written (and how
the refusal names the backend), what the rollouts receive, what a second `train` or
`resume=False` does, what the record carries into the next run (evaluations due and done,
cumulative times), the stale share of a step, and a stop while a batch is being collected.
In-memory ports and event-loop turns, as in test_pipeline_updates.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from arthex.core.errors import InvalidInputError, UnsupportedCapability
from arthex.core.pipeline import PipelineTrainer
from arthex.core.pipeline.batch_collector import BatchCollector
from arthex.core.pipeline.measures import STREAM_INDEX_KEY
from arthex.core.pipeline.stream import ScenarioStream
from arthex.core.pipeline.workers import StepGate
from arthex.core.pipeline_record import DISCARD_REASONS
from arthex.core.trainable import TrainableModel
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.ports.training_backend import BackendCapabilities, Capability
from arthex.testing.fakes.backend import InMemoryBackend

from ._pipeline_world import RUN, Crash, TurnsBackend, World, turns
from .test_pipeline_updates import one_at_a_time, trajectory, two_rewards


class NoTraining(TurnsBackend):
    """A backend that serves but does not train."""

    @property
    def capabilities(self) -> BackendCapabilities:
        return BackendCapabilities(set(super().capabilities.names) - {Capability.TRAIN})


def refusal(world: World, **options: Any) -> UnsupportedCapability:
    with pytest.raises(UnsupportedCapability) as raised:
        asyncio.run(one_at_a_time(world, 3, **options).train())
    assert asyncio.run(world.state.load(RUN)) is None, "refused before the record is written"
    return raised.value


def test_a_backend_that_cannot_train_is_refused_by_its_class_name() -> None:
    error = refusal(World(backend=NoTraining()))
    assert str(error) == "NoTraining does not support 'train'"


def test_a_loss_the_backend_lacks_is_refused_by_the_backends_class_name() -> None:
    world = World()
    world.backend._losses = frozenset({"ppo"})
    error = refusal(world)
    assert str(error) == "TurnsBackend does not support 'loss:cispo'"


def test_a_kl_penalty_below_one_is_refused_by_a_backend_without_it() -> None:
    """Any positive coefficient needs the capability, not only a large one."""
    error = refusal(World(), kl_penalty_coef=0.5)
    assert str(error) == "TurnsBackend does not support 'kl_penalty'"


def test_a_model_registered_with_another_backend_is_refused() -> None:
    world = World()
    model = world.model()

    async def main() -> None:
        await model.register(InMemoryBackend())
        await PipelineTrainer(
            model, world.backend, two_rewards, [0], None, state_store=world.state
        ).train()

    with pytest.raises(InvalidInputError) as raised:
        asyncio.run(main())
    assert str(raised.value) == (
        f"model {RUN} is registered with another backend than the one given to the "
        "PipelineTrainer; pass the backend the model was registered with"
    )


def test_the_rollouts_get_the_trainers_config() -> None:
    world = World()
    config = {"difficulty": "hard"}
    seen: list[object] = []

    async def rollout(model: TrainableModel, scenario: int, given: Any) -> TrajectoryGroup:
        seen.append(given)
        return await two_rewards(model, scenario, given)

    trainer = one_at_a_time(world, 2)
    trainer.rollout_fn, trainer.config = rollout, config
    asyncio.run(trainer.train())
    assert seen == [config, config]


def test_a_trainer_runs_once() -> None:
    trainer = one_at_a_time(World(), 1)

    async def twice() -> None:
        await trainer.train()
        await trainer.train()

    with pytest.raises(InvalidInputError) as raised:
        asyncio.run(twice())
    assert str(raised.value) == "a PipelineTrainer runs once; create a new one to continue"


def test_without_resume_the_stream_starts_over_from_the_models_step() -> None:
    world = World()
    asyncio.run(one_at_a_time(world, 10, max_steps=2).train())
    asyncio.run(one_at_a_time(world, 10, max_steps=1, resume=False).train())
    groups = asyncio.run(world.store.read(RUN, "train", 2))
    assert [g.metadata[STREAM_INDEX_KEY] for g in groups] == [0]


def test_a_resume_does_not_evaluate_again_the_step_evaluated_last() -> None:
    world = World()
    evaluated: list[list[int]] = [[], []]

    def evaluating(calls: list[int]) -> Any:
        async def eval_fn(model: TrainableModel, step: int, config: Any) -> list[Trajectory]:
            calls.append(step)
            return [Trajectory(reward=1.0)]

        return eval_fn

    for calls in evaluated:
        trainer = one_at_a_time(world, 10, max_steps=3, eval_every_n_steps=3)
        trainer.eval_fn = evaluating(calls)
        asyncio.run(trainer.train())
    # the second run starts at step 3, evaluated at the end of the first; 4..6 are not due
    assert evaluated == [[0, 3], [6]]


def evaluations_after_a_crash_at_step_two() -> list[int]:
    """Evaluating every step, not at the start: update 2 ends while the evaluation of step 1
    still runs, and the run dies; the steps the resumed run (one update) evaluates."""
    world = World()
    calls: list[int] = []

    async def stuck(model: TrainableModel, step: int, config: Any) -> list[Trajectory]:
        await asyncio.Event().wait()  # still evaluating when the run dies
        return []

    async def quick(model: TrainableModel, step: int, config: Any) -> list[Trajectory]:
        calls.append(step)
        return [Trajectory(reward=1.0)]

    def crash_at_two(step: int, metrics: Any) -> None:
        if step == 2:
            raise Crash("after update 2")

    every_step: dict[str, Any] = {"eval_at_start": False, "eval_every_n_steps": 1}
    first = one_at_a_time(world, 10, on_step=crash_at_two, **every_step)
    first.eval_fn = stuck
    with pytest.raises(Crash):
        asyncio.run(first.train())
    again = one_at_a_time(world, 10, max_steps=1, **every_step)
    again.eval_fn = quick
    asyncio.run(again.train())
    return calls


def test_an_evaluation_due_when_the_run_crashed_runs_after_the_resume() -> None:
    assert evaluations_after_a_crash_at_step_two()[0] == 1, "step 1 was due when the run died"


def test_the_step_an_update_made_due_just_before_a_crash_is_evaluated_after_the_resume() -> None:
    """Update 2 made step 2 due, and the run died before the record was saved again."""
    assert evaluations_after_a_crash_at_step_two() == [1, 2, 3]


def test_cumulative_times_continue_across_a_resume() -> None:
    world = World()
    rows: dict[int, dict[str, Any]] = {}

    def keep(step: int, metrics: Any) -> None:
        rows[step] = dict(metrics)

    asyncio.run(one_at_a_time(world, 10, max_steps=2, on_step=keep).train())
    asyncio.run(one_at_a_time(world, 10, max_steps=1, on_step=keep).train())
    assert rows[2]["time/cum/wall_s"] > 0
    assert rows[3]["time/cum/wall_s"] == pytest.approx(
        rows[2]["time/cum/wall_s"] + rows[3]["time/step_wall_s"]
    )


def test_the_stale_fraction_is_the_share_of_the_groups_taken_off_the_queue() -> None:
    """ART's `queue/actual_stale_fraction`: stale groups / groups dequeued by the step. With
    batches of one and only stale discards, a step that drops s stale groups dequeued s + 1."""
    world = World(backend=TurnsBackend(train_turns=5))
    rows: list[dict[str, Any]] = []

    async def straggling(model: TrainableModel, scenario: int, config: Any) -> TrajectoryGroup:
        await turns(60 if scenario == 0 else 0)
        return await two_rewards(model, scenario, config)

    trainer = PipelineTrainer(
        world.model(),
        world.backend,
        straggling,
        list(range(30)),
        None,
        state_store=world.state,
        num_rollout_workers=3,
        min_batch_size=1,
        max_batch_size=1,
        max_steps_off_policy=1,
        max_steps=12,
        on_step=lambda step, metrics: rows.append(dict(metrics)),
    )
    asyncio.run(trainer.train())
    stale = [row["discarded/step/stale_groups"] for row in rows]
    assert sum(stale) > 0, "the straggler outlives the bound"
    assert [row["queue/actual_stale_fraction"] for row in rows] == [s / (s + 1) for s in stale]


@pytest.mark.parametrize(
    "scenarios", ["abc", b"abc", {"a": 1}, 5], ids=["str", "bytes", "dict", "int"]
)
def test_a_scenario_source_that_is_not_a_collection_of_scenarios_is_refused(
    scenarios: Any,
) -> None:
    with pytest.raises(InvalidInputError) as raised:
        ScenarioStream(scenarios)
    assert str(raised.value) == (
        "scenarios must be an iterable or async iterable of scenarios, got "
        f"{type(scenarios).__name__}"
    )


def test_a_stop_while_a_batch_is_collected_leaves_later_groups_in_the_queue() -> None:
    async def main() -> tuple[list[TrajectoryGroup], bool, int]:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = asyncio.Event()
        collector = BatchCollector(
            queue=queue,
            gate=StepGate(0, None, 2, stop),
            pending=set(),
            discarded={reason: set() for reason in DISCARD_REASONS},
            stop=stop,
            bound=None,
            min_batch=1,
            max_batch=2,
        )
        collecting = asyncio.create_task(collector.collect(0))
        await turns(3)  # waiting on the empty queue
        stop.set()
        batch, _, ended = await collecting
        queue.put_nowait(TrajectoryGroup([trajectory(0, 0.0), trajectory(0, 1.0)]))
        await turns(3)
        return batch, ended, queue.qsize()

    assert asyncio.run(main()) == ([], False, 1)
