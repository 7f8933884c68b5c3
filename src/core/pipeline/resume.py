"""Settling the update a crash interrupted, so every scenario ends up trained exactly once.

Before an update the pipeline saves its record with `in_flight` = the batch's scenario indices
and the step N it trains from; `model.train` then logs the batch at (train, N), trains, and the
backend makes step N+1 durable; the pipeline writes its metrics row at N+1, and its next save
records the update as done. A crash can stop this anywhere. On resume, with the backend at
step S:

- S == N+1: the update is durable, so the batch was trained. Its pipeline row is written if
  the crash came before it, and the batch counts as trained.
- S == N and the batch is logged at (train, N): it was logged but not trained. It is read back
  (the store keeps every field, logprobs included) and trained without logging it again, the
  train-split row of N written if the crash lost it; so no group is stored twice.
- S == N and the batch is not logged: nothing of it reached the disk. Its scenarios become
  pending again and are sampled anew.

Anything else means something other than this pipeline trained the run: BackendError.

The scenarios discarded while the batch was collected travel with `in_flight`: once its row is
in the history they are recorded as discarded; if the update never started they are pending
again, like its batch. An `in_flight` without a batch holds the discards the stream ended on:
its row at step N is written if the crash came before it.
Settling is idempotent: a crash while settling leaves `in_flight` in place, and the next resume
settles again from what the disk shows then.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

import attrs

from ..config import TrainConfig
from ..errors import BackendError, CorruptDataError
from ..metrics import STEP_NUM_SCENARIOS, summarize
from ..pipeline_record import DISCARD_REASONS, PipelineRecord
from ..trainable import TrainableModel
from .measures import after_update, group_tokens, stream_index

logger = logging.getLogger("arthex")

PIPELINE_ROW_KEY = "discarded/cum/stale_groups"  # on every pipeline row, never null
SUMMARY_ROW_KEY = STEP_NUM_SCENARIOS  # on every train-split row `log` writes


async def has_value(model: TrainableModel, step: int, key: str) -> bool:
    """Whether some history row at `step` holds `key` (read only when resuming)."""
    return any(row.step == step and key in row.values for row in await model.history())


async def settle(
    model: TrainableModel,
    record: PipelineRecord,
    config_for: Callable[[int], TrainConfig],
    workers: int,
) -> PipelineRecord:
    """The record with its interrupted update (if any) settled; see the module docstring."""
    flight = record.in_flight
    step = await model.get_step()
    if flight is None:
        if step < record.step:
            raise BackendError(
                f"the pipeline record of {model.run} is at step {record.step} but the backend "
                f"is at step {step}: the run's checkpoints went back; resume=False starts over"
            )
        if step > record.step:
            logger.warning(
                "%s was trained outside the pipeline (step %d, the record says %d); "
                "continuing from step %d",
                model.run,
                step,
                record.step,
                step,
            )
        return attrs.evolve(record, step=step)
    if not flight.indices and step == flight.step:  # discards no update followed
        if not await _has_row(model, step, flight.metrics):
            await model.log(None, split="train", step=step, metrics=dict(flight.metrics))
        return _trained(record, step)
    if step == flight.step + 1:
        if not await has_value(model, step, PIPELINE_ROW_KEY):
            # what was measured before the update; its own time died with the process
            await model.log(None, split="train", step=step, metrics=dict(flight.metrics))
        return _trained(record, step)
    if step != flight.step:
        raise BackendError(
            f"the pipeline record of {model.run} was training step {flight.step} -> "
            f"{flight.step + 1}, but the backend is at step {step}: something else trained "
            "or rewound the run; resume=False starts over"
        )
    wanted = set(flight.indices)
    logged = [g for g in await model.logged_groups("train", step) if stream_index(g) in wanted]
    if not logged:
        logger.info("%s: the update from step %d never started; sampling again", model.run, step)
        held = [i for indices in flight.discarded.values() for i in indices]
        return attrs.evolve(
            record,
            step=step,
            pending=(*record.pending, *flight.indices, *held),
            in_flight=None,
        )
    found = sorted(i for g in logged if (i := stream_index(g)) is not None)
    if found != sorted(wanted):
        raise CorruptDataError(
            f"the train split of {model.run} at step {step} holds scenarios {found} where the "
            f"pipeline logged {sorted(wanted)}"
        )
    logger.info("%s: finishing the update from step %d with its logged batch", model.run, step)
    if not await has_value(model, step, SUMMARY_ROW_KEY):
        await model.log(None, split="train", step=step, metrics=summarize(logged, "train"))
    started = time.monotonic()
    result = await model.train(logged, config_for(step), log_groups=False, progress=False)
    train_s = time.monotonic() - started
    totals = dict(record.totals)
    row = after_update(
        flight.metrics,
        wall_s=train_s,
        train_s=train_s,
        workers=workers,
        batch_tokens=group_tokens(logged),
        rollout_tokens=0,
        totals=totals,
    )
    await model.log(None, split="train", step=result.step, metrics=row)
    return _trained(attrs.evolve(record, totals=totals), result.step)


async def _has_row(model: TrainableModel, step: int, metrics: Mapping[str, float]) -> bool:
    """Whether the history holds a row at `step` with exactly these values among its own."""
    return any(
        row.step == step and all(row.values.get(k) == v for k, v in metrics.items())
        for row in await model.history()
    )


def _trained(record: PipelineRecord, step: int) -> PipelineRecord:
    """The in-flight update is done and its row written: its batch is trained, its discards
    are the history's."""
    flight = record.in_flight
    assert flight is not None
    return attrs.evolve(
        record,
        step=step,
        trained_groups=record.trained_groups + len(flight.indices),
        discarded={r: (*record.discarded[r], *flight.discarded[r]) for r in DISCARD_REASONS},
        in_flight=None,
    )
