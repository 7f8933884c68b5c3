"""Taking a batch off the queue: the groups an update trains on, and the discards on the way.

A group is discarded, and its scenario counted under the reason, when its rollouts all failed
(`errored`), when it was sampled more than `max_steps_off_policy` steps before the update it
would join, its time in the queue included (`stale`), or when its rewards are all equal
(`zero_variance`: it teaches nothing).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import attrs

from ..errors import TooManyExceptionsError
from ..metrics import is_trainable_group
from ..pipeline_record import DISCARD_REASONS
from ..trajectories import TrajectoryGroup
from .measures import sampled_step
from .workers import END, Failed, Sampled, StepGate

logger = logging.getLogger("arthex")


@attrs.define
class BatchCollector:
    """Collects from `queue`; moves discarded scenarios from `pending` to `discarded` (the
    discards whose counts the history does not hold yet: the trainer writes them in the row of
    the update they precede, and only then does the record list them as discarded)."""

    queue: asyncio.Queue[Any]
    gate: StepGate
    pending: set[int]
    discarded: dict[str, set[int]]
    stop: asyncio.Event
    bound: int | None
    min_batch: int
    max_batch: int

    async def collect(self, step: int) -> tuple[list[TrajectoryGroup], dict[str, int], bool]:
        """`min_batch` to `max_batch` groups for the update from `step` (fewer at the end of the
        stream or on a stop), the discards per reason, and whether the stream ended. A run of
        `max_batch` failed scenarios with nothing else between them raises
        TooManyExceptionsError: a broken environment, not a few bad rollouts."""
        batch: list[TrajectoryGroup] = []
        counts = dict.fromkeys(DISCARD_REASONS, 0)
        failed_in_a_row: list[Failed] = []
        while len(batch) < self.max_batch:
            if len(batch) >= self.min_batch and self.queue.empty():
                break
            item = await self._next_item()
            if item is None:
                break
            if item is END:
                return batch, counts, True
            if not isinstance(item, Failed):
                failed_in_a_row.clear()  # rollouts work; only a run of failures is fatal
            reason = self._discard_reason(item, step)
            if reason is None:
                batch.append(item.group)
                continue
            await self.gate.release(
                [item.sampled if isinstance(item, Failed) else sampled_step(item.group)]
            )
            counts[reason] += 1
            self.pending.discard(item.index)
            self.discarded[reason].add(item.index)
            if isinstance(item, Failed):
                logger.warning("scenario %d: every rollout failed (%s)", item.index, item.error)
                failed_in_a_row.append(item)
                if len(failed_in_a_row) >= self.max_batch:
                    raise TooManyExceptionsError(
                        f"the rollouts of {len(failed_in_a_row)} scenarios in a row failed; "
                        f"first: {failed_in_a_row[0].error}. Nothing of them was recorded: a "
                        "resumed run samples them again"
                    )
        return batch, counts, False

    def _discard_reason(self, item: Sampled | Failed, step: int) -> str | None:
        if isinstance(item, Failed):
            return "errored"
        if self.bound is not None and step - sampled_step(item.group) > self.bound:
            return "stale"
        if not is_trainable_group(item.group):
            return "zero_variance"
        return None

    async def _next_item(self) -> Any:
        """The next queued item, or None once a stop is requested."""
        if not self.queue.empty() or self.stop.is_set():
            return None if self.stop.is_set() else self.queue.get_nowait()
        getting = asyncio.ensure_future(self.queue.get())
        stopping = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not getting.done():
                getting.cancel()
        if getting.done() and not getting.cancelled():
            return getting.result()
        return None
