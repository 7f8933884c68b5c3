"""Settling the discards an interrupted update carried (pipeline/resume.py): they become the
record's discards exactly when the history holds their row, and pending again otherwise; the
discards a stream ended on get their row written once. The in-memory ports, arranged as a crash
at each point leaves them (test_pipeline_resume.py's helpers)."""

from __future__ import annotations

import asyncio

from arthex.core.pipeline.resume import settle
from arthex.core.pipeline_record import InFlight, PipelineRecord
from tests.unit.test_pipeline_resume import RUN, Disk, group, run

HELD = {"zero_variance": (1,), "errored": (2,)}
ROW = {
    "discarded/step/stale_groups": 0.0,
    "discarded/step/zero_variance_groups": 1.0,
    "discarded/step/errored_groups": 1.0,
    "discarded/cum/stale_groups": 0.0,
    "discarded/cum/zero_variance_groups": 1.0,
    "discarded/cum/errored_groups": 1.0,
    "queue/groups_depth": 0.0,
}
EMPTY = {"stale": (), "zero_variance": (), "errored": ()}


def carrying(step: int, indices: tuple[int, ...], metrics: dict[str, float]) -> PipelineRecord:
    return PipelineRecord(
        step=step,
        offset=6,
        pending=(5,),
        trained_groups=1,
        in_flight=InFlight(step=step, indices=indices, metrics=metrics, discarded=HELD),
    )


def test_the_discards_of_an_update_that_became_durable_are_recorded_with_its_row() -> None:
    async def body(disk: Disk) -> PipelineRecord:
        model = await disk.model()
        await model.train([group(0)])
        await model.train([group(3), group(4)])  # 1 -> 2 became durable, its row was lost
        return await settle(model, carrying(1, (3, 4), ROW), disk.config_for, 1)

    disk, settled = run(body)
    assert settled.discarded == {**EMPTY, **HELD} and settled.in_flight is None
    assert settled.pending == (5,) and settled.trained_groups == 3
    assert [r for r in asyncio.run(disk.rows_at(2)) if "queue/groups_depth" in r] == [ROW]


def test_the_discards_of_an_update_that_never_started_are_pending_again() -> None:
    async def body(disk: Disk) -> PipelineRecord:
        model = await disk.model()
        await model.train([group(0)])
        return await settle(model, carrying(1, (3, 4), ROW), disk.config_for, 1)

    disk, settled = run(body)
    assert settled.discarded == EMPTY and settled.in_flight is None
    assert settled.pending == (1, 2, 3, 4, 5)
    assert not [r for r in asyncio.run(disk.rows_at(2)) if "discarded/cum/stale_groups" in r]


def test_the_discards_a_stream_ended_on_get_their_row_once() -> None:
    tail = {k: v for k, v in ROW.items() if k.startswith("discarded/")}

    async def body(disk: Disk) -> tuple[PipelineRecord, PipelineRecord]:
        model = await disk.model()
        await model.train([group(0)])
        first = await settle(model, carrying(1, (), tail), disk.config_for, 1)  # row lost
        again = await settle(model, carrying(1, (), tail), disk.config_for, 1)  # row written
        return first, again

    disk, (first, again) = run(body)
    assert first == again
    assert first.discarded == {**EMPTY, **HELD} and first.step == 1 and first.trained_groups == 1
    assert [r for r in asyncio.run(disk.rows_at(1)) if "discarded/cum/stale_groups" in r] == [tail]
    assert asyncio.run(disk.backend.get_step(RUN)) == 1
