"""PipelineStateStore: where a pipeline keeps its durable record of the scenario stream."""

from __future__ import annotations

from typing import Protocol

from ..core.identity import RunRef
from ..core.pipeline_record import PipelineRecord


class PipelineStateStore(Protocol):
    async def load(self, run: RunRef) -> PipelineRecord | None:
        """The record last saved for `run`, or None when there is none."""
        ...

    async def save(self, run: RunRef, record: PipelineRecord) -> None:
        """Replace the record atomically and durably: after a crash at any moment, `load`
        returns the old record or the new one, never a mix, and never loses a saved one."""
        ...
