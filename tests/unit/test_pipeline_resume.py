"""Settling an interrupted update on resume (pipeline/resume.py), case by case, on the in-memory
ports: the disk is arranged as a crash at each point leaves it, and `settle` is called directly,
so each case's record, rows and errors are checked one at a time. The whole-run view of the same
crashes is test_pipeline.py's `test_a_crash_at_any_point_of_an_update_leaves_every_scenario_...`.
"""

from __future__ import annotations

import asyncio
import io
import logging
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from arthex.core.config import TrainConfig
from arthex.core.errors import BackendError, CorruptDataError
from arthex.core.identity import RunRef
from arthex.core.model import ModelPorts
from arthex.core.pipeline.measures import STREAM_INDEX_KEY
from arthex.core.pipeline.resume import settle
from arthex.core.pipeline_record import InFlight, PipelineRecord
from arthex.core.trainable import TrainableModel
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.testing.builders import make_choice
from arthex.testing.fakes.backend import InMemoryBackend
from arthex.testing.fakes.history import InMemoryHistory
from arthex.testing.fakes.stores import InMemoryTrajectoryStore

RUN = RunRef("resume", "model")
T = TypeVar("T")


def group(index: int, rewards: tuple[float, ...] = (0.0, 1.0)) -> TrajectoryGroup:
    """Scenario `index`'s group: one trajectory per reward, two sampled tokens each."""
    return TrajectoryGroup(
        trajectories=[
            Trajectory(
                messages_and_choices=[
                    {"role": "user", "content": f"s{index}"},
                    make_choice("ab", token_ids=[10 + index, 11], logprobs=-0.7),
                ],
                reward=reward,
            )
            for reward in rewards
        ],
        metadata={STREAM_INDEX_KEY: index},
    )


class Disk:
    """The ports of one run, and a fresh model on them (a resumed process)."""

    def __init__(self) -> None:
        self.backend = InMemoryBackend()
        self.store = InMemoryTrajectoryStore()
        self.history = InMemoryHistory()
        self.asked: list[int] = []  # the steps settle asked a TrainConfig for

    async def model(self) -> TrainableModel:
        model = TrainableModel(
            name=RUN.name,
            project=RUN.project,
            base_model="in-memory",
            ports=ModelPorts(store=self.store, reporter=self.history),
        )
        await model.register(self.backend)
        return model

    def config_for(self, step: int) -> TrainConfig:
        self.asked.append(step)
        return TrainConfig(learning_rate=0.25)

    async def rows_at(self, step: int) -> list[dict[str, float | None]]:
        return [dict(r.values) for r in await self.history.rows(RUN) if r.step == step]


def run(body: Callable[[Disk], Coroutine[Any, Any, T]]) -> tuple[Disk, T]:
    disk = Disk()
    return disk, asyncio.run(body(disk))


class Terminal(io.StringIO):
    """A stderr that says it is a terminal, where progress lines are drawn by default."""

    def isatty(self) -> bool:
        return True


BEFORE = {"discarded/cum/stale_groups": 2.0, "queue/depth": 1.0}


def interrupted(step: int, indices: tuple[int, ...], **fields: object) -> PipelineRecord:
    """A record saved right before the update from `step` of the scenarios `indices`."""
    return PipelineRecord(
        step=step,
        offset=6,
        pending=(5,),
        trained_groups=3,
        in_flight=InFlight(step=step, indices=indices, metrics=BEFORE),
        **fields,  # type: ignore[arg-type]
    )


def test_a_resume_with_nothing_in_flight_continues_from_the_record_step_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "arthex")

    async def body(disk: Disk) -> PipelineRecord:
        return await settle(await disk.model(), PipelineRecord(offset=2), disk.config_for, 1)

    _, settled = run(body)
    assert settled == PipelineRecord(offset=2)
    assert not caplog.messages


def test_a_run_trained_outside_the_pipeline_is_continued_from_the_backend_step_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "arthex")

    async def body(disk: Disk) -> PipelineRecord:
        model = await disk.model()
        await model.train([group(0)])
        await model.train([group(1)])
        return await settle(model, PipelineRecord(step=1, offset=4), disk.config_for, 1)

    _, settled = run(body)
    assert settled == PipelineRecord(step=2, offset=4)
    assert caplog.messages == [
        "resume/model was trained outside the pipeline (step 2, the record says 1); "
        "continuing from step 2"
    ]


def test_a_backend_behind_the_record_is_a_backend_error_naming_both_steps() -> None:
    async def body(disk: Disk) -> PipelineRecord:
        return await settle(await disk.model(), PipelineRecord(step=2), disk.config_for, 1)

    with pytest.raises(
        BackendError,
        match="record of resume/model is at step 2 but the backend "
        "is at step 0: the run's checkpoints went back; resume=False starts over",
    ):
        run(body)


def test_a_backend_two_steps_past_the_update_in_flight_is_a_backend_error() -> None:
    async def body(disk: Disk) -> PipelineRecord:
        model = await disk.model()
        for index in (0, 1, 2):
            await model.train([group(index)])
        return await settle(model, interrupted(1, (3, 4)), disk.config_for, 1)

    with pytest.raises(
        BackendError,
        match=r"was training step 1 -> 2, but the backend is at step 3: something else trained "
        r"or rewound the run; resume=False starts over",
    ):
        run(body)


def test_an_update_that_became_durable_counts_its_batch_and_writes_the_lost_pipeline_row() -> None:
    async def body(disk: Disk) -> PipelineRecord:
        model = await disk.model()
        await model.train([group(0)])  # step 0 -> 1, before the interrupted update
        await model.train([group(3), group(4)])  # 1 -> 2 became durable; the crash came next
        return await settle(model, interrupted(1, (3, 4)), disk.config_for, 1)

    disk, settled = run(body)
    assert settled == PipelineRecord(step=2, offset=6, pending=(5,), trained_groups=5)
    pipeline_rows = [r for r in asyncio.run(disk.rows_at(2)) if "queue/depth" in r]
    assert pipeline_rows == [BEFORE]
    assert disk.asked == [], "nothing is trained again"


def test_an_update_that_never_reached_the_disk_puts_its_scenarios_back_to_be_sampled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "arthex")

    async def body(disk: Disk) -> PipelineRecord:
        model = await disk.model()
        await model.train([group(0)])
        return await settle(model, interrupted(1, (3, 4)), disk.config_for, 1)

    disk, settled = run(body)
    assert settled == PipelineRecord(step=1, offset=6, pending=(3, 4, 5), trained_groups=3)
    assert caplog.messages == ["resume/model: the update from step 1 never started; sampling again"]
    assert asyncio.run(disk.backend.get_step(RUN)) == 1


def test_a_logged_batch_is_trained_from_the_store_with_its_summary_and_pipeline_rows(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, "arthex")
    totals = {"wall_s": 10.0, "trained_tokens": 100.0, "rollout_tokens": 40.0}
    bounds: list[float] = []
    terminal = Terminal()

    async def body(disk: Disk) -> PipelineRecord:
        model = await disk.model()
        await model.train([group(0)])
        # the crash came after the groups of the update from step 1 were stored, before the row
        await disk.store.write(RUN, "train", 1, [group(3, (0.0, 1.0)), group(4, (1.0, 1.0))])
        monkeypatch.setattr(sys, "stderr", terminal)
        started = time.monotonic()
        settled = await settle(model, interrupted(1, (3, 4), totals=totals), disk.config_for, 2)
        bounds.append(time.monotonic() - started)
        return settled

    disk, settled = run(body)
    assert terminal.getvalue() == "", "settling draws no progress line, even on a terminal"
    assert caplog.messages == [
        "resume/model: finishing the update from step 1 with its logged batch"
    ]
    assert disk.asked == [1], "the batch trains with the config of the step it trains from"
    assert asyncio.run(disk.backend.get_step(RUN)) == 2
    assert len(asyncio.run(disk.store.read(RUN, "train", 1))) == 2, "not stored a second time"
    (summary,) = [r for r in asyncio.run(disk.rows_at(1)) if "train/reward" in r]
    assert summary["data/step_num_scenarios"] == 2.0
    assert summary["train/reward"] == pytest.approx((0.0 + 1.0 + 1.0 + 1.0) / 4)
    rows = asyncio.run(disk.rows_at(2))
    (training,) = [r for r in rows if "loss/learning_rate" in r]
    assert training["loss/learning_rate"] == 0.25
    (pipeline,) = [r for r in rows if "queue/depth" in r]
    assert pipeline["discarded/cum/stale_groups"] == 2.0
    train_s = pipeline["time/step_backend_train_s"]
    assert train_s is not None
    assert 0.0 <= train_s <= bounds[0] and pipeline["time/step_wall_s"] == train_s
    # two groups of two trajectories, two sampled tokens each; no rollout ran while settling
    assert pipeline["throughput/accepted_train_tok_per_s"] == pytest.approx(8 / max(train_s, 1e-9))
    assert settled.totals == {
        **totals,
        "wall_s": 10.0 + train_s,
        "backend_train_s": train_s,
        "trainer_idle_s": 0.0,
        "rollout_s": 0.0,
        "rollout_idle_s": 0.0,
        "worker_s": 2 * train_s,
        "trained_tokens": 108.0,
        "rollout_tokens": 40.0,
    }
    assert settled.step == 2 and settled.in_flight is None
    assert settled.trained_groups == 5 and settled.pending == (5,)


def test_a_logged_batch_whose_summary_row_survived_is_not_summarized_twice() -> None:
    async def body(disk: Disk) -> PipelineRecord:
        model = await disk.model()
        await model.train([group(0)])
        await model.log([group(3), group(4)], split="train", step=1)
        return await settle(model, interrupted(1, (3, 4)), disk.config_for, 1)

    disk, settled = run(body)
    assert len([r for r in asyncio.run(disk.rows_at(1)) if "train/reward" in r]) == 1
    assert settled.step == 2 and settled.trained_groups == 5


def test_a_logged_batch_that_is_not_the_one_in_flight_is_corrupt_data_naming_both() -> None:
    async def body(disk: Disk) -> PipelineRecord:
        model = await disk.model()
        await model.train([group(0)])
        await disk.store.write(RUN, "train", 1, [group(3)])
        return await settle(model, interrupted(1, (3, 4)), disk.config_for, 1)

    with pytest.raises(
        CorruptDataError,
        match=r"train split of resume/model at step 1 holds scenarios \[3\] where the pipeline "
        r"logged \[3, 4\]",
    ):
        run(body)
