"""Every PipelineStateStore of this repo against the shipped contract, the fake included; and
what only the file can get wrong: a crash mid-save, a damaged file, a URI root."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from arthex.adapters.run_files.pipeline import JsonPipelineStateStore
from arthex.core.errors import CorruptDataError, InvalidInputError
from arthex.core.pipeline_record import PipelineRecord
from arthex.ports.trajectory_store import PipelineStateStore
from arthex.testing.contracts.pipeline_state import (
    RUN,
    PipelineStateStoreContract,
    full_record,
)
from arthex.testing.fakes.pipeline_state import InMemoryPipelineStateStore


class TestJsonPipelineStateStore(PipelineStateStoreContract):
    @pytest.fixture
    def state_store(self, tmp_path: Path) -> PipelineStateStore:
        return JsonPipelineStateStore(str(tmp_path / "art"))


class TestInMemoryPipelineStateStore(PipelineStateStoreContract):
    @pytest.fixture
    def state_store(self) -> PipelineStateStore:
        return InMemoryPipelineStateStore()


def test_the_record_lives_in_the_run_directory(tmp_path: Path) -> None:
    store = JsonPipelineStateStore(str(tmp_path))
    asyncio.run(store.save(RUN, full_record()))
    assert (tmp_path / RUN.project / "models" / RUN.name / "pipeline_state.json").is_file()


def test_a_save_that_dies_before_its_rename_leaves_the_old_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonPipelineStateStore(str(tmp_path))
    asyncio.run(store.save(RUN, full_record()))

    def dies(source: object, target: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", dies)
    with pytest.raises(OSError, match="disk gone"):
        asyncio.run(store.save(RUN, PipelineRecord(step=99, offset=99)))
    monkeypatch.undo()
    assert asyncio.run(store.load(RUN)) == full_record()
    leftovers = [
        p.name for p in store.path(RUN).parent.iterdir() if p.name != "pipeline_state.json"
    ]
    assert leftovers == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a pipeline record"),
        (b'{"version": 99}', "unknown version"),
        (b'{"version": 1, "step": 1}', "cannot be read"),
    ],
)
def test_a_damaged_record_is_refused_naming_the_file(
    tmp_path: Path, content: bytes, message: str
) -> None:
    store = JsonPipelineStateStore(str(tmp_path))
    path = store.path(RUN)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.raises(CorruptDataError, match=message) as caught:
        asyncio.run(store.load(RUN))
    assert str(path) in str(caught.value) or message == "not JSON"
    assert os.path.exists(path), "a bad record is reported, never removed"


def test_a_record_whose_places_overlap_is_refused() -> None:
    data = full_record().to_json()
    data["pending"] = [[3, 4]]  # also discarded as stale
    with pytest.raises(CorruptDataError, match="scenario 3 is both"):
        PipelineRecord.from_json(data)
    data = full_record().to_json()
    data["offset"] = 10
    with pytest.raises(CorruptDataError, match="offset is 10"):
        PipelineRecord.from_json(data)


def test_index_runs_keep_a_long_stream_small() -> None:
    record = PipelineRecord(offset=1_000_000, discarded={"stale": range(1_000_000)})
    assert record.to_json()["discarded"]["stale"] == [[0, 1_000_000]]


def test_a_uri_root_is_refused_before_anything_is_written() -> None:
    with pytest.raises(InvalidInputError, match="local directory"):
        JsonPipelineStateStore("s3://bucket/runs")
