"""The parquet store's step file (adapters/parquet/step_file.py), function by function: a new
part streamed batch by batch, to a path or to an output stream; a merge's copy of its sources
with the group indexes following on; the checks of a source before anything is copied, each
refusal's whole message; the footer's write tokens; and the legacy parts a rewrite leaves out.
Every expectation is read from the physical parquet file with pyarrow or worked out by hand."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from arthex.adapters.parquet.encoding import Batch, encode, encode_batches
from arthex.adapters.parquet.parts import FOLDED_KEY, WRITES_KEY, PartFile
from arthex.adapters.parquet.schema import VERSION_KEY
from arthex.adapters.parquet.step_file import (
    merge,
    rewrite_sources,
    step_file_version,
    write_part,
    write_tokens,
)
from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.core.errors import CorruptDataError
from arthex.core.identity import RunRef
from arthex.core.trajectories import TrajectoryGroup
from arthex.testing.builders import make_group
from tests._parts import write_legacy_part

LOCAL = pafs.LocalFileSystem()
RUN = RunRef("proj", "run-1")
V2 = {b"art.trajectory_parquet.version": b"2"}


def tagged(*tags: int) -> list[TrajectoryGroup]:
    return [make_group([0.0, 1.0], metadata={"n": tag}) for tag in tags]


def batches(*tags: int) -> list[Batch]:
    """One batch per group (each group's JSON is over one byte)."""
    return list(encode_batches(tagged(*tags), batch_bytes=1))


def file_tags(table: pa.Table) -> list[object]:
    """The tag of each row's group, from the group JSON as stored."""
    return [json.loads(raw)["metadata"]["n"] for raw in table.column("group_json").to_pylist()]


def compressions(path: str | Path | pa.Buffer) -> set[str]:
    source = pa.BufferReader(path) if isinstance(path, pa.Buffer) else path
    metadata = pq.ParquetFile(source).metadata
    return {
        metadata.row_group(g).column(c).compression
        for g in range(metadata.num_row_groups)
        for c in range(metadata.num_columns)
    }


def source(path: Path, table: pa.Table, metadata: dict[bytes, bytes] | None = None) -> Path:
    """`table` written as a parquet file, with `metadata` (ART's v2 version when not given)."""
    pq.write_table(table.replace_schema_metadata(V2 if metadata is None else metadata), path)
    return path


def opened(*paths: Path) -> list[tuple[str, pq.ParquetFile]]:
    return [(str(p), pq.ParquetFile(p)) for p in paths]


def refusal(sources: list[tuple[str, pq.ParquetFile]], sink: Path) -> str:
    with pytest.raises(CorruptDataError) as caught:
        merge(sources, str(sink), V2)
    return str(caught.value)


# --- a new part ---------------------------------------------------------------------------


def test_a_part_of_several_batches_is_one_row_group_per_batch_with_its_token_in_zstd(
    tmp_path: Path,
) -> None:
    first, *rest = batches(0, 1, 2)
    path = tmp_path / "part.parquet"
    write_part(str(path), first, iter(rest), "tok-1")
    file = pq.ParquetFile(path)
    assert file.metadata.num_row_groups == 3
    assert [file.metadata.row_group(g).num_rows for g in range(3)] == [2, 2, 2]
    table = file.read()
    assert table.column("group_index").to_pylist() == [0, 0, 1, 1, 2, 2]
    assert file_tags(table) == [0, 0, 1, 1, 2, 2]
    assert table.schema.metadata == {**V2, WRITES_KEY: b'["tok-1"]'}
    assert compressions(path) == {"ZSTD"}


def test_a_part_is_written_to_an_output_stream_on_a_named_helper_thread() -> None:
    """The object store's writer hands an open stream, never a path; the encoding thread is
    named, so a stack dump says who is writing."""

    class Sink(io.BytesIO):
        threads: ClassVar[set[str]] = set()

        def write(self, data: Any) -> int:
            self.threads.add(threading.current_thread().name)
            return super().write(data)

    one = pa.BufferOutputStream()
    write_part(one, batches(5)[0], iter(()), "tok-a")
    streamed = Sink()
    first, *rest = batches(6, 7)
    write_part(streamed, first, iter(rest), "tok-b")
    for data, tags, token in [
        (one.getvalue(), [5, 5], b'["tok-a"]'),
        (pa.py_buffer(streamed.getvalue()), [6, 6, 7, 7], b'["tok-b"]'),
    ]:
        table = pq.read_table(pa.BufferReader(data))
        assert file_tags(table) == tags
        assert table.schema.metadata == {**V2, WRITES_KEY: token}
        assert compressions(data) == {"ZSTD"}
    assert "arthex-parquet_0" in Sink.threads


def test_a_path_that_reads_as_a_uri_is_refused_never_written_to_another_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path is a local file's: `mock:part.parquet` (relative) is refused by the local
    filesystem, where pyarrow left to choose would write it into its in-memory `mock:`
    filesystem (as it would write `s3:...` to S3), and the caller would think it on disk."""
    monkeypatch.chdir(tmp_path)
    first, *rest = batches(0, 1)
    whole = opened(source(tmp_path / "whole.parquet", encode(tagged(0))))
    writes: list[Callable[[str], None]] = [
        lambda sink: write_part(sink, batches(9)[0], iter(()), "tok"),
        lambda sink: write_part(sink, first, iter(rest), "tok"),
        lambda sink: merge(whole, sink, V2),
    ]
    for write in writes:
        with pytest.raises(pa.ArrowInvalid, match=re.escape("got a URI: 'mock:part.parquet'")):
            write("mock:part.parquet")
    assert sorted(os.listdir(tmp_path)) == ["whole.parquet"]


def test_a_batch_that_fails_mid_part_raises_its_own_error(tmp_path: Path) -> None:
    first, second = batches(0, 1)

    def rest() -> Iterator[Batch]:
        yield second
        raise ValueError("the third group cannot be serialized")

    with pytest.raises(ValueError, match=r"^the third group cannot be serialized$"):
        write_part(str(tmp_path / "part.parquet"), first, rest(), "tok")


# --- merging ------------------------------------------------------------------------------


def test_a_merge_copies_every_source_in_order_with_group_indexes_following_on(
    tmp_path: Path,
) -> None:
    reads: set[str] = set()

    class Counted(pq.ParquetFile):  # type: ignore[misc]
        def read_row_group(self, *args: Any, **kwargs: Any) -> pa.Table:
            reads.add(threading.current_thread().name)
            return super().read_row_group(*args, **kwargs)

    paths = [
        source(tmp_path / "a.parquet", encode(tagged(0, 1))),
        source(tmp_path / "b.parquet", encode(tagged(2))),
        source(tmp_path / "c.parquet", encode(tagged(3, 4, 5))),
    ]
    sink = tmp_path / "merged.parquet"
    footer = {**V2, WRITES_KEY: b'["t1", "t2"]'}
    merge([(str(p), Counted(p)) for p in paths], str(sink), footer)
    table = pq.read_table(sink)
    assert table.column("group_index").to_pylist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert file_tags(table) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert table.schema.metadata == footer
    assert compressions(sink) == {"ZSTD"}
    assert "arthex-merge_0" in reads  # the read-ahead thread, named for a stack dump


def test_group_indexes_with_a_gap_are_refused_naming_their_source(tmp_path: Path) -> None:
    whole = source(tmp_path / "whole.parquet", encode(tagged(0)))
    three = encode(tagged(0, 1, 2))
    gap = source(
        tmp_path / "gap.parquet", three.filter(pa.array([True, True, False, False, True, True]))
    )
    sink = tmp_path / "merged.parquet"
    said = "group indexes [0, 2] are not contiguous from 0; nothing was written"
    assert refusal(opened(gap, whole), sink) == f"cannot add groups to {gap}: {said}"
    assert refusal(opened(whole, gap), sink) == f"cannot add groups to {gap}: {said}"
    twelve = encode(tagged(*range(12)))
    without_5 = pa.array([i != 5 for i in twelve.column("group_index").to_pylist()])
    many = source(tmp_path / "many.parquet", twelve.filter(without_5))
    assert refusal(opened(many), sink) == (
        f"cannot add groups to {many}: group indexes [0, 1, 2, 3, 4, 6, 7, 8, 9, 10] are not "
        "contiguous from 0; nothing was written"
    )


def test_a_row_without_a_group_index_is_refused_naming_its_source(tmp_path: Path) -> None:
    table = encode(tagged(0))
    nulls = pa.array([0, None], pa.int64())
    bad = source(tmp_path / "bad.parquet", table.set_column(1, "group_index", nulls))
    assert refusal(opened(bad), tmp_path / "merged.parquet") == (
        f"cannot add groups to {bad}: a row has no group_index; nothing was written"
    )


@pytest.mark.parametrize(
    ("metadata", "found"),
    [
        ({}, "no version"),
        ({VERSION_KEY: b"1"}, "version '1'"),
        ({VERSION_KEY: b"\xff2"}, "version '\ufffd2'"),
    ],
)
def test_a_source_that_is_not_v2_is_refused_saying_what_version_it_has(
    tmp_path: Path, metadata: dict[bytes, bytes], found: str
) -> None:
    other = source(tmp_path / "other.parquet", encode(tagged(0)), metadata)
    assert refusal(opened(other), tmp_path / "merged.parquet") == (
        f"cannot add groups to {other}: it has {found} in 'art.trajectory_parquet.version', "
        "not ART v2 trajectory parquet; nothing was written. Move it out of the split first"
    )


def test_a_source_without_authoritative_columns_or_of_other_types_is_refused(
    tmp_path: Path,
) -> None:
    table = encode(tagged(0))
    lean = source(tmp_path / "lean.parquet", table.drop_columns(["group_json", "trajectory_json"]))
    assert refusal(opened(lean), tmp_path / "merged.parquet") == (
        f"cannot add groups to {lean}: it lacks the column(s) group_json, trajectory_json; "
        "nothing was written"
    )
    words = pa.array(["high", "low"])
    typed = source(tmp_path / "typed.parquet", table.set_column(8, "reward", words))
    said = refusal(opened(typed), tmp_path / "merged.parquet")
    assert said.startswith(f"cannot add groups to {typed}: its columns are not ART's v2 layout (")
    assert said.endswith("); nothing was written")
    assert "as a scalar of type double" in said  # pyarrow's reason


# --- what a rewrite starts from -----------------------------------------------------------


def test_a_folded_part_still_on_disk_is_not_copied_again(tmp_path: Path) -> None:
    """A writer that died after replacing the step file left the legacy part it folded; the
    next rewrite reads the step file and the new part only, and records the part again."""
    store = ParquetTrajectoryStore(str(tmp_path))
    target = Path(asyncio.run(store.write(RUN, "train", 0, tagged(0))))
    legacy = Path(write_legacy_part(target.parent, 0, 1, tagged(1)))
    kept = legacy.read_bytes()
    asyncio.run(store.write(RUN, "train", 0, tagged(2)))
    legacy.write_bytes(kept)
    new = source(tmp_path / "new.parquet", encode(tagged(3)), {**V2, WRITES_KEY: b'["t3"]'})
    with ExitStack() as stack:
        current = stack.enter_context(pq.ParquetFile(target))
        extras = [PartFile("train", 0, 1, str(legacy))]
        sources, footer = rewrite_sources(stack, LOCAL, str(target), current, extras, str(new))
        assert [where for where, _ in sources] == [str(target), str(new)]
    identity = {
        "name": "0000-1.parquet",
        "size": len(kept),
        "tail": hashlib.sha256(kept).hexdigest(),
    }
    assert json.loads(footer[FOLDED_KEY]) == [identity]
    tokens = json.loads(footer[WRITES_KEY])
    assert len(tokens) == 3 and tokens[-1] == "t3"


@pytest.mark.parametrize(
    ("raw", "tokens"),
    [
        (None, []),
        (b'["a", 3, "b"]', ["a", "b"]),
        (b"not json", []),
        (b'{"a": 1}', []),
        (b'"ab"', []),
        (b"5", []),
    ],
)
def test_the_write_tokens_are_the_strings_of_the_footers_list(
    tmp_path: Path, raw: bytes | None, tokens: list[str]
) -> None:
    metadata = V2 if raw is None else {**V2, WRITES_KEY: raw}
    part = source(tmp_path / "part.parquet", encode(tagged(0)), metadata)
    assert write_tokens(pq.ParquetFile(part)) == tokens


def test_a_step_files_version_is_its_size_and_last_bytes(tmp_path: Path) -> None:
    path = source(tmp_path / "0000.parquet", encode(tagged(0, 1)))
    data = path.read_bytes()
    assert step_file_version(LOCAL, str(path)) == (len(data), data[-64 * 1024 :])
    assert step_file_version(LOCAL, str(tmp_path / "0001.parquet")) is None
