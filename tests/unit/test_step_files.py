"""One file per step: a further write at a step rewrites its file as old + new, and the legacy
`-N` parts of earlier arthex versions are read, then folded into the step file."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from arthex.adapters.parquet.encoding import encode
from arthex.adapters.parquet.parts import FOLDED_KEY, WRITES_KEY
from arthex.adapters.parquet.schema import AUTHORITATIVE, WRITE_OPTIONS
from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.apps.loaders import list_parts, load_trajectories
from arthex.core.errors import CorruptDataError
from arthex.core.identity import RunRef
from arthex.core.trajectories import TrajectoryGroup
from arthex.testing.builders import make_group, rich_groups
from arthex.testing.contracts.trajectory_store import assert_groups_identical
from tests._parts import write_legacy_part

RUN = RunRef("proj", "run-1")


@pytest.fixture
def store(tmp_path: Path) -> ParquetTrajectoryStore:
    return ParquetTrajectoryStore(str(tmp_path))


def write(store: ParquetTrajectoryStore, groups: list[TrajectoryGroup], step: int = 0) -> Path:
    return Path(asyncio.run(store.write(RUN, "train", step, groups)))


def read(store: ParquetTrajectoryStore, step: int = 0) -> list[TrajectoryGroup]:
    return asyncio.run(store.read(RUN, "train", step))


def tagged(*tags: int) -> list[TrajectoryGroup]:
    return [make_group([0.0, 1.0], metadata={"n": tag}) for tag in tags]


def tags(groups: list[TrajectoryGroup]) -> list[object]:
    return [g.metadata["n"] for g in groups]


def split_dir(tmp_path: Path) -> Path:
    return tmp_path / "proj" / "models" / "run-1" / "trajectories" / "train"


def names(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def test_the_step_file_alone_holds_every_write_with_group_indexes_running_on(
    store: ParquetTrajectoryStore,
) -> None:
    write(store, rich_groups(), step=2)
    path = write(store, tagged(10, 11), step=2)
    write(store, [], step=2)  # an empty batch adds nothing and loses nothing
    table = pq.read_table(path)
    n_rich = len(rich_groups())
    assert sorted(set(table.column("group_index").to_pylist())) == list(range(n_rich + 2))
    assert_groups_identical([*rich_groups(), *tagged(10, 11)], read(store, 2))
    footer = pq.read_schema(path).metadata
    assert len(json.loads(footer[WRITES_KEY])) == 3  # one token per write
    assert FOLDED_KEY not in footer


def test_a_write_onto_a_step_file_without_write_tokens_keeps_it(
    store: ParquetTrajectoryStore, tmp_path: Path
) -> None:
    """A step file written by ART (or an earlier arthex) has no write tokens in its footer."""
    directory = split_dir(tmp_path)
    directory.mkdir(parents=True)
    pq.write_table(encode(tagged(0, 1)), directory / "0000.parquet", compression="zstd")
    write(store, tagged(2))
    assert tags(read(store)) == [0, 1, 2]
    assert names(directory) == [".lock", "0000.parquet"]


def test_legacy_parts_are_read_after_the_step_file_in_part_order(
    store: ParquetTrajectoryStore, tmp_path: Path
) -> None:
    write(store, tagged(0))
    for part in (1, 2, 10):
        write_legacy_part(split_dir(tmp_path), 0, part, tagged(part))
    assert tags(read(store)) == [0, 1, 2, 10]
    assert [p.part for p in store.parts(RUN, "train", 0)] == [0, 1, 2, 10]
    frame = load_trajectories(tmp_path / "proj" / "models" / "run-1").collect()
    assert frame["part"].unique(maintain_order=True).to_list() == [0, 1, 2, 10]


def test_the_next_write_folds_legacy_parts_into_the_step_file(
    store: ParquetTrajectoryStore, tmp_path: Path
) -> None:
    directory = split_dir(tmp_path)
    write(store, tagged(0))
    write_legacy_part(directory, 0, 1, tagged(1))
    write_legacy_part(directory, 0, 2, tagged(2))
    path = write(store, tagged(3))
    assert names(directory) == [".lock", "0000.parquet"]
    assert tags(read(store)) == [0, 1, 2, 3]
    folded = json.loads(pq.read_schema(path).metadata[FOLDED_KEY])
    assert [entry["name"] for entry in folded] == ["0000-1.parquet", "0000-2.parquet"]


def test_legacy_parts_without_a_step_file_are_folded_too(
    store: ParquetTrajectoryStore, tmp_path: Path
) -> None:
    write_legacy_part(split_dir(tmp_path), 5, 1, tagged(1))
    assert tags(read(store, 5)) == [1]
    write(store, tagged(2), step=5)
    assert names(split_dir(tmp_path)) == [".lock", "0005.parquet"]
    assert tags(read(store, 5)) == [1, 2]


def test_a_folded_part_left_behind_by_a_crash_is_read_once_and_removed_later(
    store: ParquetTrajectoryStore, tmp_path: Path
) -> None:
    """A writer that dies between replacing the step file and deleting the folded parts
    leaves them on disk; the step file's footer says it holds them."""
    directory = split_dir(tmp_path)
    write(store, tagged(0))
    legacy = Path(write_legacy_part(directory, 0, 1, tagged(1)))
    kept = legacy.read_bytes()
    write(store, tagged(2))
    legacy.write_bytes(kept)  # as if the delete never happened
    run_dir = tmp_path / "proj" / "models" / "run-1"
    assert tags(read(store)) == [0, 1, 2]
    assert [(s, st, p) for s, st, p, _ in list_parts(run_dir)] == [("train", 0, 0)]
    assert load_trajectories(run_dir).collect().height == 6
    write(store, tagged(3))
    assert names(directory) == [".lock", "0000.parquet"]
    assert tags(read(store)) == [0, 1, 2, 3]


def test_a_new_part_reusing_a_folded_name_is_not_mistaken_for_it(
    store: ParquetTrajectoryStore, tmp_path: Path
) -> None:
    """An earlier arthex writing beside a newer one may reuse `-1` after the fold; only a
    part with the folded one's exact bytes is skipped."""
    directory = split_dir(tmp_path)
    write(store, tagged(0))
    write_legacy_part(directory, 0, 1, tagged(1))
    write(store, tagged(2))
    write_legacy_part(directory, 0, 1, tagged(7, 8))
    assert tags(read(store)) == [0, 1, 2, 7, 8]
    write(store, tagged(3))
    assert tags(read(store)) == [0, 1, 2, 7, 8, 3]
    assert names(directory) == [".lock", "0000.parquet"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not parquet at all", "cannot be read as parquet"),
        (None, "no version"),  # a v1 file: parquet without the version metadata
    ],
)
def test_a_step_file_that_is_not_v2_refuses_the_write_and_stays_untouched(
    store: ParquetTrajectoryStore, tmp_path: Path, content: bytes | None, message: str
) -> None:
    directory = split_dir(tmp_path)
    directory.mkdir(parents=True)
    path = directory / "0000.parquet"
    if content is None:
        pq.write_table(pa.table({"reward": [1.0], "group_index": [0]}), path)
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    with pytest.raises(CorruptDataError, match=message) as caught:
        write(store, tagged(1))
    assert str(path) in str(caught.value)
    assert "nothing was written" in str(caught.value)
    assert path.read_bytes() == before
    assert names(directory) == [".lock", "0000.parquet"]


def test_a_step_file_with_gaps_in_its_group_indexes_refuses_the_write(
    store: ParquetTrajectoryStore, tmp_path: Path
) -> None:
    directory = split_dir(tmp_path)
    directory.mkdir(parents=True)
    table = encode(tagged(0, 1, 2)).filter(pa.array([True, True, False, False, True, True]))
    pq.write_table(table, directory / "0000.parquet", **WRITE_OPTIONS)
    with pytest.raises(CorruptDataError, match="not contiguous"):
        write(store, tagged(3))
    assert names(directory) == [".lock", "0000.parquet"]


def test_a_step_file_with_only_the_authoritative_columns_is_added_to(
    store: ParquetTrajectoryStore, tmp_path: Path
) -> None:
    """The JSON columns are all a reader needs; the analytics view of the old rows is null."""
    directory = split_dir(tmp_path)
    directory.mkdir(parents=True)
    full = encode(tagged(0))
    lean = full.select(AUTHORITATIVE).replace_schema_metadata(full.schema.metadata)
    pq.write_table(lean, directory / "0000.parquet")
    write(store, tagged(1))
    assert tags(read(store)) == [0, 1]
    table = pq.read_table(directory / "0000.parquet")
    assert table.column("reward").to_pylist() == [None, None, 0.0, 1.0]
    without_json = full.drop_columns(["trajectory_json"])
    pq.write_table(without_json, directory / "0001.parquet")
    with pytest.raises(CorruptDataError, match="lacks the column"):
        write(store, tagged(2), step=1)
