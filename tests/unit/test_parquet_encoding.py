"""How ParquetTrajectoryStore encodes a part: the direct trajectory_json equals the model's own
dump byte for byte, large parts stream in row groups that read back like one table, a failure
mid-stream leaves nothing behind, and the store works on any pyarrow filesystem root."""

from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from openai.types.chat.chat_completion import Choice

from arthex.adapters.parquet import json_cells
from arthex.adapters.parquet.encoding import encode
from arthex.adapters.parquet.json_cells import full_trajectory_json, trajectory_json
from arthex.adapters.parquet.store import ParquetTrajectoryStore, PartFile, resolve_root
from arthex.core.errors import InvalidInputError, UnsupportedCapability
from arthex.core.identity import RunRef
from arthex.core.trajectories import History, Trajectory, TrajectoryGroup
from arthex.testing.builders import make_choice, make_group, make_trajectory, rich_groups
from arthex.testing.contracts.trajectory_store import assert_groups_identical
from tests._parts import write_legacy_part
from tests.unit.test_parquet_layout import trajectories

RUN = RunRef("proj", "run-1")


def write(store: ParquetTrajectoryStore, groups: list[TrajectoryGroup], step: int = 0) -> Path:
    return Path(asyncio.run(store.write(RUN, "train", step, groups)))


def read(store: ParquetTrajectoryStore, step: int = 0) -> list[TrajectoryGroup]:
    return asyncio.run(store.read(RUN, "train", step))


def big_groups(n: int = 6) -> list[TrajectoryGroup]:
    """Groups of ~10 KB of JSON each, with failures and an all-failed group in the middle."""
    groups = [
        TrajectoryGroup(
            [
                make_trajectory(
                    float(t),
                    prompt=f"group {g} " + "x" * 2000,
                    choice=make_choice("y" * 1500, logprobs=-0.25),
                    metadata={"g": g, "t": t},
                )
                for t in range(3)
            ],
            metadata={"g": g},
        )
        for g in range(n)
    ]
    groups.insert(2, TrajectoryGroup(exceptions=[ValueError("every rollout failed")]))
    return groups


# --- trajectory_json --------------------------------------------------------------------------


def all_trajectories() -> list[Trajectory]:
    return [t for g in rich_groups() for t in g.trajectories]


@pytest.mark.parametrize("index", range(len(all_trajectories())))
def test_direct_dump_is_the_models_dump(index: int) -> None:
    trajectory = all_trajectories()[index]
    assert trajectory_json(trajectory) == full_trajectory_json(trajectory)
    assert json_cells._items_json(trajectory.messages_and_choices) is not None  # direct


def test_non_finite_floats_everywhere_are_written_as_constants() -> None:
    """A nested model writes a non-finite float as null by itself; such Choices take the slow
    path, so logprobs of -inf and NaN survive as `-Infinity`/`NaN` like every other float."""
    choice = make_choice("hi", token_ids=[1, 2], logprobs=[-math.inf, math.nan],
                         message_extra={"x": math.inf})  # fmt: skip
    assert choice.model_extra is not None
    choice.model_extra["f"] = math.nan
    trajectory = make_trajectory(
        1.0,
        messages=[{"role": "user", "content": "a", "n": math.nan}, choice],
        tools=[{"type": "function", "x": math.inf}],
        additional_histories=[
            History(
                messages_and_choices=[choice, {"role": "user", "v": -math.inf}],
                tools=[{"y": math.nan}],
            )
        ],
        metrics={"m": math.inf},
    )
    dumped = trajectory_json(trajectory)
    assert dumped == full_trajectory_json(trajectory)
    assert b'"logprob":-Infinity' in dumped
    assert b'"logprob":NaN' in dumped
    assert b'"logprob":null' not in dumped


def test_items_of_other_types_take_the_models_serializer() -> None:
    class MyChoice(Choice):
        pass

    choice = make_choice("sub")
    trajectory = make_trajectory(0.5, messages=[{"role": "user", "content": "q"}])
    trajectory.messages_and_choices.append(MyChoice.model_validate(choice.model_dump()))
    assert trajectory_json(trajectory) == full_trajectory_json(trajectory)


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(trajectory=trajectories)
def test_direct_dump_equals_the_models_dump_for_any_trajectory(trajectory: Trajectory) -> None:
    assert trajectory_json(trajectory) == full_trajectory_json(trajectory)


def test_tools_column_is_cut_from_the_same_dump() -> None:
    table = encode(rich_groups()).to_pylist()
    rich = all_trajectories()[0]
    assert table[0]["tools"] is not None
    assert table[0]["tools"].encode() == json_cells.json_bytes(rich.tools)


# --- streaming in row groups ------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> ParquetTrajectoryStore:
    return ParquetTrajectoryStore(str(tmp_path / "art"))


def test_large_part_streams_in_row_groups_that_read_as_one(
    store: ParquetTrajectoryStore, tmp_path: Path
) -> None:
    groups = big_groups()
    whole = write(store, groups, step=1)  # one batch: one write_table
    store.batch_bytes = 20_000  # about two groups per row group
    streamed = write(store, groups, step=2)
    assert pq.ParquetFile(whole).metadata.num_row_groups == 1
    assert pq.ParquetFile(streamed).metadata.num_row_groups >= 3
    assert pq.read_table(streamed).equals(pq.read_table(whole))
    assert pq.read_schema(streamed) == pq.read_schema(whole)
    assert_groups_identical(groups, read(store, 2))
    indexes = pq.read_table(streamed, columns=["group_index"]).column(0).to_pylist()
    assert indexes == sorted(indexes)
    assert set(indexes) == set(range(len(groups)))


def test_encodings_json_plain_and_repeated_columns_as_dictionary(
    store: ParquetTrajectoryStore,
) -> None:
    path = write(store, big_groups())
    meta = pq.ParquetFile(path).metadata.row_group(0)
    encodings = {
        meta.column(c).path_in_schema: set(meta.column(c).encodings)
        for c in range(meta.num_columns)
    }
    assert "RLE_DICTIONARY" not in encodings["trajectory_json"]
    assert "RLE_DICTIONARY" in encodings["group_json"]
    assert "RLE_DICTIONARY" in encodings["messages.list.element.role"]
    assert "RLE_DICTIONARY" in encodings["tools"]
    assert {meta.column(c).compression for c in range(meta.num_columns)} == {"ZSTD"}


def test_bad_group_in_a_later_batch_leaves_no_part(store: ParquetTrajectoryStore) -> None:
    kept = write(store, [make_group(metadata={"kept": True})])
    store.batch_bytes = 20_000
    groups = big_groups()
    groups[-1].metadata["bad"] = object()  # type: ignore[assignment]
    with pytest.raises(InvalidInputError, match=rf"groups\[{len(groups) - 1}\]"):
        write(store, groups)
    assert sorted(os.listdir(kept.parent)) == [".lock", "0000.parquet"]  # no temp file
    assert [g.metadata for g in read(store)] == [{"kept": True}]


@pytest.mark.faults
def test_crash_mid_stream_leaves_no_part(
    store: ParquetTrajectoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = write(store, [make_group()])
    store.batch_bytes = 20_000
    original = pq.ParquetWriter.write_table
    calls = []

    def crash_on_second(self: Any, table: pa.Table, *args: Any, **kwargs: Any) -> None:
        calls.append(table.num_rows)
        if len(calls) == 2:
            raise OSError("disk full")
        original(self, table, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", crash_on_second)
    with pytest.raises(OSError, match="disk full"):
        write(store, big_groups())
    monkeypatch.undo()
    assert sorted(os.listdir(kept.parent)) == [".lock", "0000.parquet"]
    assert len(read(store)) == 1
    assert write(store, big_groups()).name == "0000.parquet"
    assert len(read(store)) == 1 + len(big_groups())


def test_type_errors_come_before_any_directory(tmp_path: Path) -> None:
    store = ParquetTrajectoryStore(str(tmp_path / "art"))
    bad: Any = [make_group(), TrajectoryGroup([make_trajectory()]), "not a group"]
    with pytest.raises(InvalidInputError, match=r"groups\[2\]"):
        write(store, bad)
    assert not (tmp_path / "art").exists()


# --- roots and listing ------------------------------------------------------------------------


def test_roots_local_uri_and_explicit_filesystem(tmp_path: Path) -> None:
    local, path = resolve_root(str(tmp_path))
    assert (local.type_name, path) == ("local", str(tmp_path))
    uri, path = resolve_root(tmp_path.as_uri())
    assert (uri.type_name, path) == ("local", str(tmp_path))
    given_fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    assert resolve_root("s3://bucket/prefix/", given_fs) == (given_fs, "bucket/prefix")
    assert resolve_root("runs/", given_fs) == (given_fs, "runs")


@pytest.mark.parametrize("root", ["", "nosuchscheme://x/y"])
def test_bad_roots_are_refused(root: str) -> None:
    with pytest.raises(InvalidInputError, match="root"):
        ParquetTrajectoryStore(root)


def test_filesystem_must_be_a_pyarrow_filesystem(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"pyarrow\.fs\.FileSystem"):
        ParquetTrajectoryStore(str(tmp_path), filesystem="local")


def test_a_uri_root_writes_where_the_path_would(tmp_path: Path) -> None:
    by_uri = ParquetTrajectoryStore(tmp_path.as_uri())
    location = asyncio.run(by_uri.write(RUN, "val", 2, [make_group()]))
    assert location == str(tmp_path / "proj/models/run-1/trajectories/val/0002.parquet")
    assert len(asyncio.run(ParquetTrajectoryStore(str(tmp_path)).read(RUN, "val", 2))) == 1


def test_parts_lists_every_split_and_filters(store: ParquetTrajectoryStore) -> None:
    for split, step in [("train", 0), ("train", 3), ("val", 3)]:
        asyncio.run(store.write(RUN, split, step, [make_group()]))
    base = store.split_dir(RUN, "train")
    write_legacy_part(base, 0, 1, [make_group()])
    assert store.parts(RUN) == [
        PartFile("train", 0, 0, f"{base}/0000.parquet"),
        PartFile("train", 0, 1, f"{base}/0000-1.parquet"),
        PartFile("train", 3, 0, f"{base}/0003.parquet"),
        PartFile("val", 3, 0, f"{store.split_dir(RUN, 'val')}/0003.parquet"),
    ]
    assert [p.split for p in store.parts(RUN, steps=3)] == ["train", "val"]
    assert [p.part for p in store.parts(RUN, "train", [0])] == [0, 1]
    assert store.parts(RUN, "test") == []
    with pytest.raises(InvalidInputError, match="steps"):
        store.parts(RUN, steps=["3"])  # type: ignore[list-item]


def test_subtree_filesystem_takes_the_object_store_path(tmp_path: Path) -> None:
    """A filesystem with no hard links publishes by copy; the files are the same."""
    subtree = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    store = ParquetTrajectoryStore("stores/a", filesystem=subtree)
    location = asyncio.run(store.write(RUN, "train", 0, rich_groups()))
    assert location == "stores/a/proj/models/run-1/trajectories/train/0000.parquet"
    assert_groups_identical(rich_groups(), asyncio.run(store.read(RUN, "train", 0)))
    directory = tmp_path / "stores/a/proj/models/run-1/trajectories/train"
    assert sorted(os.listdir(directory)) == ["0000.parquet"]  # the temp object is gone
    with pytest.raises(UnsupportedCapability, match=r"store\.parts"):
        store.part_paths(RUN, "train", 0)


def test_a_relative_root_stays_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = ParquetTrajectoryStore(".art/")
    location = asyncio.run(store.write(RUN, "val", 0, [make_group()]))
    assert location == ".art/proj/models/run-1/trajectories/val/0000.parquet"
    assert store.part_paths(RUN, "val", 0) == [Path(location)]
    assert len(asyncio.run(store.read(RUN, "val", 0))) == 1
