"""InMemoryPipelineStateStore: the pipeline record in a dict, run against the same contract as
the JSON file store. Records go through JSON on the way in and out, as on disk."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ...core.identity import RunRef
from ...core.pipeline_record import PipelineRecord

if TYPE_CHECKING:
    from ...ports.trajectory_store import PipelineStateStore


class InMemoryPipelineStateStore:
    def __init__(self) -> None:
        self._records: dict[RunRef, str] = {}
        self.saves = 0

    async def load(self, run: RunRef) -> PipelineRecord | None:
        text = self._records.get(run)
        return None if text is None else PipelineRecord.from_json(json.loads(text))

    async def save(self, run: RunRef, record: PipelineRecord) -> None:
        self._records[run] = json.dumps(record.to_json(), allow_nan=False)
        self.saves += 1


if TYPE_CHECKING:
    _fits: type[PipelineStateStore] = InMemoryPipelineStateStore
