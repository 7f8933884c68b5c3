"""Publishing a write: every group logged at (split, step) goes into the step file.

A write first encodes its groups into a temp file beside the step file (the costly part, done
by every writer in parallel; `write_part`). Then, holding the split's lock:
- no step file yet: the temp file becomes the step file (a hard link, which fails rather
  than replace a file that appeared meanwhile);
- a step file already there: a second temp file is written holding the step file's row
  groups, then any legacy `-N` parts (parts.py), then the new groups, with the group indexes
  shifted to follow on (`rewrite_sources`, `merge`); it is fsynced and renamed over the step
  file, and the folded legacy parts are deleted afterwards.

The old row groups are copied as arrow tables, not decoded into groups and re-encoded, so a
rewrite costs about one read and one write of the step file. A reader sees the old step file
or the new one, never a mix (the rename is atomic), and a crash at any point leaves the old
file or the new one plus, at worst, a temp file (named `.tmp-*`, which no reader lists) and
already-folded legacy parts, which readers skip and the next writer deletes.

This module builds the files; how they are published and writers serialized is local_disk.py
(a lock file) and object_store.py (checks instead of a lock).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ...core.errors import CorruptDataError
from .encoding import Batch
from .parts import FOLDED_KEY, WRITES_KEY, PartFile, folded_parts, part_identity, read_tail
from .schema import AUTHORITATIVE, FORMAT_VERSION, SCHEMA, VERSION_KEY, WRITE_OPTIONS

__all__ = [
    "Version",
    "merge",
    "opened_step_file",
    "rewrite_sources",
    "step_file_version",
    "write_part",
    "write_tokens",
]

_LOCAL = pafs.LocalFileSystem()
_PLAIN_SCHEMA = SCHEMA.remove_metadata()


def _footer(writes: Sequence[str], folded: Sequence[dict[str, Any]] = ()) -> dict[bytes, bytes]:
    """A part's footer metadata: the layout version, the write tokens it holds and the
    legacy parts folded into it."""
    metadata = {
        VERSION_KEY: str(FORMAT_VERSION).encode(),
        WRITES_KEY: json.dumps(list(writes)).encode(),
    }
    if folded:
        metadata[FOLDED_KEY] = json.dumps(list(folded)).encode()
    return metadata


def _options(sink: Any) -> dict[str, Any]:
    """The write options for `sink`: a local path is never parsed as a URI."""
    return dict(WRITE_OPTIONS, filesystem=_LOCAL) if isinstance(sink, str) else WRITE_OPTIONS


# --- encoding a new part ----------------------------------------------------------------------


def write_part(sink: Any, first: Batch, rest: Iterator[Batch], token: str) -> None:
    """Write a new part to `sink`: a local path (never parsed as a URI) or an output stream.
    Its footer carries the write's token.

    A part of one batch is one `write_table`. A larger part is streamed: batch k is encoded,
    compressed and written on a helper thread while batch k+1 is serialized here. Serializing
    holds the GIL; parquet encoding, zstd and the writes release it, so with two cores the
    part costs about its serialization alone, and at most two batches are in memory at once
    (the one being written and the one being built)."""
    options = _options(sink)
    footer = _footer([token])
    if first.last:
        pq.write_table(first.table.replace_schema_metadata(footer), sink, **options)
        return
    with (
        pq.ParquetWriter(sink, SCHEMA.with_metadata(footer), **options) as writer,
        concurrent.futures.ThreadPoolExecutor(1, "arthex-parquet") as pool,
    ):
        pending = pool.submit(writer.write_table, first.table)
        try:
            for batch in rest:
                pending.result()
                pending = pool.submit(writer.write_table, batch.table)
        except BaseException:
            concurrent.futures.wait([pending])  # never close the writer mid-write
            raise
        pending.result()


# --- merging ------------------------------------------------------------------------------------


def merge(
    sources: Sequence[tuple[str, pq.ParquetFile]], sink: Any, footer: dict[bytes, bytes]
) -> None:
    """Write the row groups of every source, in order, to `sink` as one part: each source's
    group indexes follow on from the previous source's. Sources are (path for messages, open
    file); every one must be ART v2 trajectory parquet, checked before any row is copied.

    Row group k+1 is read (and decompressed) on a helper thread while row group k is encoded
    and written here; both release the GIL, so a copy costs about its writing alone."""
    for where, file in sources:
        _check_source(where, file)
    jobs = [(where, file, i) for where, file in sources for i in range(file.num_row_groups)]
    offset, current, seen = 0, "", set[int]()
    with (
        pq.ParquetWriter(sink, SCHEMA.with_metadata(footer), **_options(sink)) as writer,
        concurrent.futures.ThreadPoolExecutor(1, "arthex-merge") as pool,
    ):
        ahead = [pool.submit(file.read_row_group, i) for _, file, i in jobs[:1]]
        for position, (where, _, _) in enumerate(jobs):
            table = ahead.pop().result()
            if position + 1 < len(jobs):
                _, following, index = jobs[position + 1]
                ahead.append(pool.submit(following.read_row_group, index))
            if where != current:  # the previous source is whole: its groups come first
                offset += _group_count(current, seen)
                current, seen = where, set()
            table = _conform(where, table)
            indexes = table.column("group_index")
            if indexes.null_count:
                raise CorruptDataError(
                    f"cannot add groups to {where}: a row has no group_index; nothing was written"
                )
            seen.update(pc.unique(indexes).to_pylist())
            shifted = pc.add(indexes, pa.scalar(offset, pa.int64()))
            writer.write_table(table.set_column(1, SCHEMA.field(1), shifted))
        _group_count(current, seen)


def _group_count(where: str, seen: set[int]) -> int:
    """How many groups a source holds, once all its rows are read: its indexes must run
    0..n-1, as ART's reader requires."""
    if seen != set(range(len(seen))):
        raise CorruptDataError(
            f"cannot add groups to {where}: group indexes {sorted(seen)[:10]} are not contiguous "
            "from 0; nothing was written"
        )
    return len(seen)


def _check_source(where: str, file: pq.ParquetFile) -> None:
    version = (file.schema_arrow.metadata or {}).get(VERSION_KEY)
    if version != str(FORMAT_VERSION).encode():
        found = "no version" if version is None else f"version {version.decode(errors='replace')!r}"
        raise CorruptDataError(
            f"cannot add groups to {where}: it has {found} in {VERSION_KEY.decode()!r}, not ART "
            f"v2 trajectory parquet; nothing was written. Move it out of the split first"
        )


def _conform(where: str, table: pa.Table) -> pa.Table:
    """The row group in the store's exact schema (another writer may differ in metadata or
    field order, never in meaning). A missing analytics column is filled with nulls; the
    authoritative columns must be there."""
    missing = [name for name in AUTHORITATIVE if name not in table.column_names]
    if missing:
        raise CorruptDataError(
            f"cannot add groups to {where}: it lacks the column(s) {', '.join(missing)}; "
            "nothing was written"
        )
    try:
        columns = [
            table.column(field.name).cast(field.type)
            if field.name in table.column_names
            else pa.nulls(table.num_rows, field.type)
            for field in _PLAIN_SCHEMA
        ]
        return pa.Table.from_arrays(columns, schema=_PLAIN_SCHEMA)
    except pa.ArrowException as error:
        raise CorruptDataError(
            f"cannot add groups to {where}: its columns are not ART's v2 layout ({error}); "
            "nothing was written"
        ) from error


# --- what a rewrite starts from -----------------------------------------------------------------

Version = tuple[int, bytes]
"""(size, last bytes) of a step file: what tells two versions apart (its footer holds every
write token)."""


@contextlib.contextmanager
def opened_step_file(
    filesystem: pafs.FileSystem, path: str
) -> Iterator[tuple[pq.ParquetFile, Version] | None]:
    """The step file opened (reads see this version even if it is replaced meanwhile) with
    its version, or None when there is none."""
    try:
        handle = filesystem.open_input_file(path)
    except FileNotFoundError:
        yield None
        return
    try:
        version = read_tail(handle)
        try:
            file = pq.ParquetFile(handle)
        except (pa.ArrowException, OSError) as error:
            raise CorruptDataError(
                f"cannot add groups to {path}: it cannot be read as parquet ({error}); nothing "
                "was written. Move it out of the split first"
            ) from error
        with file:
            yield file, version
    finally:
        handle.close()


def rewrite_sources(
    stack: contextlib.ExitStack,
    filesystem: pafs.FileSystem,
    target: str,
    current: pq.ParquetFile | None,
    extras: Sequence[PartFile],
    new: str,
) -> tuple[list[tuple[str, pq.ParquetFile]], dict[bytes, bytes]]:
    """What the new step file `target` holds, for `merge`: the `current` step file, then the
    legacy parts in `extras` it does not hold yet, then the new part `new` (opened on
    `stack`); and its footer, with every write token and the folded parts."""
    sources: list[tuple[str, pq.ParquetFile]] = []
    held: list[dict[str, Any]] = []
    writes: list[str] = []
    if current is not None:
        sources.append((target, current))
        held = folded_parts(current.schema_arrow.metadata)
        writes = write_tokens(current)
    folded = []
    for part in extras:
        identity = part_identity(filesystem, part.path)
        folded.append(identity)
        if identity not in held:
            sources.append((part.path, _open(stack, filesystem, part.path)))
    added = _open(stack, filesystem, new)
    sources.append((new, added))
    return sources, _footer([*writes, *write_tokens(added)], folded)


def _open(stack: contextlib.ExitStack, filesystem: pafs.FileSystem, path: str) -> pq.ParquetFile:
    handle = stack.enter_context(filesystem.open_input_file(path))
    return stack.enter_context(pq.ParquetFile(handle))


def step_file_version(filesystem: pafs.FileSystem, path: str) -> Version | None:
    """The version of the step file at `path`, or None when there is none."""
    try:
        with filesystem.open_input_file(path) as handle:
            return read_tail(handle)
    except FileNotFoundError:
        return None


def write_tokens(file: pq.ParquetFile) -> list[str]:
    """The write tokens in a part's footer (none when it has no readable list)."""
    raw = (file.schema_arrow.metadata or {}).get(WRITES_KEY)
    try:
        tokens = json.loads(raw) if raw is not None else []
    except ValueError:
        return []
    return [t for t in tokens if isinstance(t, str)] if isinstance(tokens, list) else []
