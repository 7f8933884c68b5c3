"""JsonPipelineStateStore: the pipeline's record as `pipeline_state.json` in the run directory.

Each save writes the whole record to a temp file, fsyncs it, renames it over the old one and
fsyncs the directory (`_files.atomic_write_bytes`), so a crash at any moment leaves the old
record or the new one. The record is small (index runs, not index lists), so rewriting it
whole after each step costs a few milliseconds.

A run with no `pipeline_state.json` whose `state.json` holds ART 0.5.23's pipeline record
(ART's PipelineTrainer left it; art_pipeline.py) loads as the record arthex continues from;
that key is only read, and the first save writes `pipeline_state.json`.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ...core.errors import CorruptDataError, InvalidInputError
from ...core.identity import RunRef
from ...core.pipeline_record import PipelineRecord
from ..files import atomic_write_bytes
from ..layout import PIPELINE_STATE, RunLayout
from .art_pipeline import art_pipeline_record
from .state import JsonRunState

if TYPE_CHECKING:
    from ...ports.trajectory_store import PipelineStateStore

STATE_FILE = PIPELINE_STATE


class JsonPipelineStateStore:
    """Records at `{root}/{project}/models/{name}/pipeline_state.json`; holds nothing open."""

    def __init__(self, root: str) -> None:
        if "://" in str(root):
            raise InvalidInputError(
                f"the pipeline record needs a local directory (it is replaced by an atomic "
                f"rename), got {root!r}; keep base_path local"
            )
        self._root = Path(root)

    def path(self, run: RunRef) -> Path:
        return RunLayout.of(self._root, run).pipeline_state

    async def load(self, run: RunRef) -> PipelineRecord | None:
        return await asyncio.to_thread(self._load_run, run)

    def _load_run(self, run: RunRef) -> PipelineRecord | None:
        record = self._load(self.path(run))
        if record is not None:
            return record
        state = JsonRunState(str(self._root))
        found = state.read(run)
        return None if found is None else art_pipeline_record(found, state.path(run))

    async def save(self, run: RunRef, record: PipelineRecord) -> None:
        data = json.dumps(record.to_json(), allow_nan=False, separators=(",", ":")).encode()
        await asyncio.to_thread(atomic_write_bytes, self.path(run), data)

    @staticmethod
    def _load(path: Path) -> PipelineRecord | None:
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            data = json.loads(text)
        except ValueError as error:
            raise CorruptDataError(
                f"{path} is not JSON ({error}); move it aside to start the scenario stream over"
            ) from error
        if not isinstance(data, dict):
            raise CorruptDataError(f"{path} holds {type(data).__name__}, not a pipeline record")
        return PipelineRecord.from_json(data, where=str(path))


if TYPE_CHECKING:
    _fits: type[PipelineStateStore] = JsonPipelineStateStore
