"""The pipeline record's file, checked on the physical pipeline_state.json: one compact JSON
object, never a non-finite number, and what a file holding something else is called."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from arthex.adapters.run_files.pipeline import JsonPipelineStateStore
from arthex.core.errors import CorruptDataError
from arthex.core.identity import RunRef
from arthex.core.pipeline_record import PipelineRecord

RUN = RunRef("proj", "agent-001")


def test_the_record_is_written_as_compact_json(tmp_path: Path) -> None:
    store = JsonPipelineStateStore(str(tmp_path))
    asyncio.run(store.save(RUN, PipelineRecord(step=2, offset=5, totals={"groups": 4.0})))
    data = (tmp_path / "proj" / "models" / "agent-001" / "pipeline_state.json").read_bytes()
    assert data.startswith(b'{"version":1,"step":2,"offset":5,"pending":[],"discarded":{')
    assert data.endswith(
        b',"totals":{"groups":4.0},'
        b'"discarded_unlisted":{"stale":0,"zero_variance":0,"errored":0},"evaluated":[]}'
    )
    assert b" " not in data


def test_a_non_finite_total_is_refused_before_the_file_is_written(tmp_path: Path) -> None:
    store = JsonPipelineStateStore(str(tmp_path))
    asyncio.run(store.save(RUN, PipelineRecord(step=1, offset=1)))
    before = store.path(RUN).read_bytes()
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError, match="not JSON compliant"):
            asyncio.run(store.save(RUN, PipelineRecord(step=2, offset=2, totals={"x": bad})))
    assert store.path(RUN).read_bytes() == before
    assert json.loads(before)["step"] == 1


def test_a_file_holding_a_list_is_named_with_what_it_holds(tmp_path: Path) -> None:
    store = JsonPipelineStateStore(str(tmp_path))
    path = store.path(RUN)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"[1, 2]")
    with pytest.raises(CorruptDataError) as caught:
        asyncio.run(store.load(RUN))
    assert str(caught.value) == f"{path} holds list, not a pipeline record"
