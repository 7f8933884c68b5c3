"""ParquetTrajectoryStore on S3: a real S3-compatible server (moto's) on loopback, reached over
HTTP by pyarrow's S3 filesystem, exactly as a bucket on AWS would be."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from arthex.adapters.parquet.store import ParquetTrajectoryStore, read_part
from arthex.apps.loaders import load_trajectories
from arthex.core.errors import CorruptDataError
from arthex.core.identity import ModelSpec, RunRef
from arthex.core.trajectories import TrajectoryGroup
from arthex.ports.trajectory_store import TrajectoryStore
from arthex.testing.builders import make_choice, make_group, make_trajectory, rich_groups
from arthex.testing.contracts.trajectory_store import (
    TrajectoryStoreContract,
    assert_groups_identical,
)
from tests._parts import write_legacy_part
from tests._s3_server import KEY, REGION, S3, SECRET

pytestmark = pytest.mark.e2e

RUN = RunRef("proj", "run-1")


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    server = S3()
    yield server
    server.stop()


def write(store: ParquetTrajectoryStore, groups: list[TrajectoryGroup], step: int = 0) -> str:
    return asyncio.run(store.write(RUN, "train", step, groups))


def read(store: ParquetTrajectoryStore, step: int = 0) -> list[TrajectoryGroup]:
    return asyncio.run(store.read(RUN, "train", step))


class TestParquetTrajectoryStoreOnS3(TrajectoryStoreContract):
    @pytest.fixture
    def store(self, s3: S3) -> TrajectoryStore:
        return ParquetTrajectoryStore(f"s3://{s3.prefix()}", filesystem=s3.filesystem)


def test_step_files_are_objects_where_art_puts_files(s3: S3) -> None:
    prefix = s3.prefix()
    store = ParquetTrajectoryStore(f"s3://{prefix}", filesystem=s3.filesystem)
    first = write(store, rich_groups(), step=3)
    second = write(store, [make_group()], step=3)
    base = f"s3://{prefix}/proj/models/run-1/trajectories/train"
    assert (first, second) == (f"{base}/0003.parquet", f"{base}/0003.parquet")
    asyncio.run(store.write_model_spec(ModelSpec(RUN, base_model="tiny", config={"lr": 1e-5})))
    assert s3.keys(prefix) == [  # no temp objects, no lock, no directory markers
        "proj/models/run-1/model.json",
        "proj/models/run-1/trajectories/train/0003.parquet",
    ]
    with s3.filesystem.open_input_file(f"{prefix}/proj/models/run-1/model.json") as spec:
        assert b'"base_model": "tiny"' in spec.read()
    assert [(p.split, p.step, p.part) for p in store.parts(RUN)] == [("train", 3, 0)]
    part = store.parts(RUN, "train", 3)[0]
    schema = pq.read_schema(part.path, filesystem=s3.filesystem)
    assert schema.metadata[b"art.trajectory_parquet.version"] == b"2"
    assert_groups_identical([*rich_groups(), make_group()], read_part(part.path, s3.filesystem))


def test_legacy_parts_on_s3_are_read_and_folded_by_the_next_write(s3: S3) -> None:
    prefix = s3.prefix()
    store = ParquetTrajectoryStore(prefix, filesystem=s3.filesystem)
    write(store, [make_group(metadata={"n": 0})], step=4)
    directory = store.split_dir(RUN, "train")
    for n in (1, 2):
        write_legacy_part(directory, 4, n, [make_group(metadata={"n": n})], s3.filesystem)
    assert [g.metadata["n"] for g in read(store, 4)] == [0, 1, 2]
    assert [p.part for p in store.parts(RUN, "train", 4)] == [0, 1, 2]
    write(store, [make_group(metadata={"n": 3})], step=4)
    assert [g.metadata["n"] for g in read(store, 4)] == [0, 1, 2, 3]
    assert s3.keys(directory) == ["0004.parquet"]


def test_configured_by_uri_alone(s3: S3) -> None:
    """Credentials and endpoint in the URI, as pyarrow's from_uri reads them."""
    prefix = s3.prefix()
    uri = (
        f"s3://{KEY}:{SECRET}@{prefix}?endpoint_override={s3.endpoint}&scheme=http&region={REGION}"
    )
    store = ParquetTrajectoryStore(uri)
    where = write(store, [make_group(metadata={"by": "uri"})])
    assert where == f"s3://{prefix}/proj/models/run-1/trajectories/train/0000.parquet"
    other = ParquetTrajectoryStore(f"s3://{prefix}", filesystem=s3.filesystem)
    assert [g.metadata for g in read(other)] == [{"by": "uri"}]


def test_configured_by_the_aws_environment(s3: S3, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "AWS_ENDPOINT_URL": f"http://{s3.endpoint}",
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    prefix = s3.prefix()
    store = ParquetTrajectoryStore(f"s3://{prefix}")
    write(store, [make_group(metadata={"by": "env"})], step=5)
    assert asyncio.run(store.steps(RUN, "train")) == [5]
    assert [g.metadata for g in read(store, 5)] == [{"by": "env"}]


def test_large_part_streams_as_a_multipart_upload(s3: S3) -> None:
    """~12 MB of JSON in row groups of ~1 MB: the upload goes out in parts while later row
    groups are still being serialized, and reads back whole."""
    noise = os.urandom(200_000).hex()  # incompressible, so the object really is large
    groups = [
        TrajectoryGroup(
            [
                make_trajectory(
                    float(t),
                    prompt=f"{g}-{t}:{noise[(g * 3 + t) * 1000 :]}",
                    choice=make_choice("ok", token_ids=[1, 2], logprobs=[-0.5, -0.25]),
                )
                for t in range(3)
            ],
            metadata={"g": g},
        )
        for g in range(10)
    ]
    store = ParquetTrajectoryStore(f"s3://{s3.prefix()}", filesystem=s3.filesystem)
    store.batch_bytes = 1 << 20
    write(store, groups)
    (part,) = store.parts(RUN, "train", 0)
    assert s3.filesystem.get_file_info(part.path).size > 5 << 20  # more than one upload part
    assert pq.ParquetFile(s3.filesystem.open_input_file(part.path)).metadata.num_row_groups > 5
    assert_groups_identical(groups, read(store))


def test_temp_objects_and_foreign_keys_are_ignored(s3: S3) -> None:
    prefix = s3.prefix()
    store = ParquetTrajectoryStore(f"s3://{prefix}", filesystem=s3.filesystem)
    write(store, [make_group()], step=1)
    directory = store.split_dir(RUN, "train")
    for name in (".tmp-0005.parquet.123.abcd", "notes.txt", "12.parquet", "0008-0.parquet"):
        with s3.filesystem.open_output_stream(f"{directory}/{name}") as out:
            out.write(b"half an upload")
    assert asyncio.run(store.steps(RUN, "train")) == [1]
    assert read(store, 5) == []
    with s3.filesystem.open_output_stream(f"{directory}/0002.parquet") as out:
        out.write(b"definitely not parquet")
    with pytest.raises(CorruptDataError, match=r"0002\.parquet"):
        read(store, 2)


class _ForeignCopy(pafs.FileSystemHandler):  # type: ignore[misc]  # pyarrow is untyped
    """S3, except that right after the store's first copy to a part name, another writer's
    part lands on the same key: the race two processes can run on an object store."""

    def __init__(self, inner: pafs.FileSystem, foreign: bytes) -> None:
        self.inner = inner
        self.foreign = foreign
        self.replaced: list[str] = []

    def copy_file(self, src: str, dest: str) -> None:
        self.inner.copy_file(src, dest)
        if not self.replaced and dest.endswith(".parquet"):
            self.replaced.append(dest)
            with self.inner.open_output_stream(dest) as out:
                out.write(self.foreign)

    def get_type_name(self) -> str:
        return "s3-with-a-rival"

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return list(self.inner.get_file_info(paths))

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return list(self.inner.get_file_info(selector))

    def create_dir(self, path: str, recursive: bool) -> None:
        """Keys need no directories."""

    def delete_dir(self, path: str) -> None:
        self.inner.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.inner.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise NotImplementedError

    def delete_file(self, path: str) -> None:
        self.inner.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.inner.move(src, dest)

    def normalize_path(self, path: str) -> str:
        return str(self.inner.normalize_path(path))

    def open_input_stream(self, path: str) -> Any:
        return self.inner.open_input_stream(path)

    def open_input_file(self, path: str) -> Any:
        return self.inner.open_input_file(path)

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        return self.inner.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        raise NotImplementedError


def test_a_copy_replaced_by_another_writer_is_noticed(s3: S3) -> None:
    prefix = s3.prefix()
    plain = ParquetTrajectoryStore(prefix, filesystem=s3.filesystem)
    write(plain, [make_group(metadata={"who": "rival"})], step=9)
    (rival,) = plain.parts(RUN, "train", 9)
    with s3.filesystem.open_input_file(rival.path) as file:
        foreign = file.read()
    s3.filesystem.delete_file(rival.path)

    handler = _ForeignCopy(s3.filesystem, foreign)
    racing = ParquetTrajectoryStore(prefix, filesystem=pafs.PyFileSystem(handler))
    where = write(racing, [make_group(metadata={"who": "us"})], step=9)
    assert handler.replaced == [f"{plain.split_dir(RUN, 'train')}/0009.parquet"]
    assert where.endswith("/0009.parquet")  # ours was added to the rival's step file
    assert [g.metadata["who"] for g in read(plain, 9)] == ["rival", "us"]
    assert s3.keys(f"{prefix}/proj/models/run-1/trajectories/train") == ["0009.parquet"]


def test_load_trajectories_reads_a_run_on_s3(s3: S3) -> None:
    prefix = s3.prefix()
    store = ParquetTrajectoryStore(f"s3://{prefix}", filesystem=s3.filesystem)
    groups = rich_groups()
    write(store, groups, step=1)
    write_legacy_part(store.split_dir(RUN, "train"), 1, 1, [make_group()], s3.filesystem)
    write(store, [make_group()], step=2)
    frame = load_trajectories(
        f"s3://{prefix}/proj/models/run-1", split="train", steps=1, filesystem=s3.filesystem
    ).collect()
    expected = [t.reward for g in groups for t in g.trajectories]
    expected += [t.reward for t in make_group().trajectories]
    assert frame["step"].unique().to_list() == [1]
    assert frame["part"].unique().sort().to_list() == [0, 1]
    assert [r for r in frame["reward"].to_list() if r is not None] == expected
