"""Publishing a write: every group logged at (split, step) goes into the step file.

A write first encodes its groups into a temp file beside the step file (the costly part, done
by every writer in parallel). Then, holding the split's lock:
- no step file yet: the temp file becomes the step file (a hard link, which fails rather
  than replace a file that appeared meanwhile);
- a step file already there: a second temp file is written holding the step file's row
  groups, then any legacy `-N` parts (parquet_parts.py), then the new groups, with the
  group indexes shifted to follow on; it is fsynced and renamed over the step file, and the
  folded legacy parts are deleted afterwards.

The old row groups are copied as arrow tables, not decoded into groups and re-encoded, so a
rewrite costs about one read and one write of the step file. A reader sees the old step file
or the new one, never a mix (the rename is atomic), and a crash at any point leaves the old
file or the new one plus, at worst, a temp file (named `.tmp-*`, which no reader lists) and
already-folded legacy parts, which readers skip and the next writer deletes.

Locking, local disk: the lock is `trajectories/{split}/.lock`, taken with `flock`, so writers
in every process on the machine (and on NFS, which maps flock to its byte-range locks) are
serialized; the kernel releases it when a writer dies. Writers of different splits never
wait on each other. ART's loaders list `*.parquet` only, so the lock file is invisible to
them.

Locking, object stores (S3 and the rest): pyarrow offers no lock and no create-if-absent, so
writers in one process are serialized by an in-process lock, and writers in different
processes are checked, not locked: a writer records the step file it read (size and last
bytes), builds the new file as a temp object, checks right before the server-side copy that
the step file is still the one it read (else it starts over from the new one), and after the
copy reads the step file's footer back: its write token (`arthex.writes`) must be there, or
it starts over. The one loss left is two processes passing that check within the same
milliseconds: the later copy then wins. Use one writing process per (split, step) on an
object store, or a local disk, when that matters.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import json
import os
import secrets
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ...core.errors import CorruptDataError
from ..files import TEMP_PREFIX, fsync_dir, fsync_file, temp_path_for
from .encoding import Batch
from .parts import (
    FOLDED_KEY,
    WRITES_KEY,
    PartFile,
    folded_parts,
    part_identity,
    part_name,
    step_parts,
)
from .schema import FORMAT_VERSION, SCHEMA, VERSION_KEY, WRITE_OPTIONS

__all__ = ["LOCK_FILE", "make_dirs", "write_local", "write_remote"]

LOCK_FILE = ".lock"
# Filesystems where a directory is only a key prefix: nothing to create before writing.
PREFIX_ONLY = ("s3", "gcs", "abfs")
_TAIL_BYTES = 64 * 1024
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


# --- encoding a new part ----------------------------------------------------------------------


def write_part(sink: Any, first: Batch, rest: Iterator[Batch], token: str) -> None:
    """Write a new part to `sink`: a local path (never parsed as a URI) or an output stream.
    Its footer carries the write's token.

    A part of one batch is one `write_table`. A larger part is streamed: batch k is encoded,
    compressed and written on a helper thread while batch k+1 is serialized here. Serializing
    holds the GIL; parquet encoding, zstd and the writes release it, so with two cores the
    part costs about its serialization alone, and at most two batches are in memory at once
    (the one being written and the one being built)."""
    options = dict(WRITE_OPTIONS, filesystem=_LOCAL) if isinstance(sink, str) else WRITE_OPTIONS
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
    file); every one must be ART v2 trajectory parquet, checked before its rows are copied."""
    options = dict(WRITE_OPTIONS, filesystem=_LOCAL) if isinstance(sink, str) else WRITE_OPTIONS
    with pq.ParquetWriter(sink, SCHEMA.with_metadata(footer), **options) as writer:
        offset = 0
        for where, file in sources:
            _check_source(where, file)
            seen: set[int] = set()
            for index in range(file.num_row_groups):
                table = _conform(where, file.read_row_group(index))
                indexes = table.column("group_index")
                if indexes.null_count:
                    raise CorruptDataError(
                        f"{where}: a row has no group_index; nothing was written"
                    )
                seen.update(pc.unique(indexes).to_pylist())
                shifted = pc.add(indexes, pa.scalar(offset, pa.int64()))
                writer.write_table(table.set_column(1, SCHEMA.field(1), shifted))
            if seen != set(range(len(seen))):
                raise CorruptDataError(
                    f"{where}: group indexes {sorted(seen)[:10]} are not contiguous from 0; "
                    "nothing was written"
                )
            offset += len(seen)


def _check_source(where: str, file: pq.ParquetFile) -> None:
    version = (file.schema_arrow.metadata or {}).get(VERSION_KEY)
    if version != str(FORMAT_VERSION).encode():
        found = "no version" if version is None else f"version {version.decode(errors='replace')!r}"
        raise CorruptDataError(
            f"cannot add groups to {where}: it has {found} in {VERSION_KEY.decode()!r}, not ART "
            f"v2 trajectory parquet; nothing was written. Move it out of the split first"
        )


def _conform(where: str, table: pa.Table) -> pa.Table:
    """The row group in the store's exact schema (ART's writer may differ in metadata or
    field order, never in meaning)."""
    try:
        return table.select(_PLAIN_SCHEMA.names).cast(_PLAIN_SCHEMA)
    except (KeyError, pa.ArrowException) as error:
        raise CorruptDataError(
            f"cannot add groups to {where}: its columns are not ART's v2 layout ({error}); "
            "nothing was written"
        ) from error


# --- local disk -------------------------------------------------------------------------------


@contextlib.contextmanager
def split_lock(directory: Path) -> Iterator[None]:
    """The split's writer lock: `flock` on `{directory}/.lock`, released on exit or death."""
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


def write_local(
    directory: Path, split: str, step: int, first: Batch, rest: Iterator[Batch]
) -> Path:
    make_dirs(directory)
    temp = temp_path_for(directory / part_name(step))
    try:
        write_part(str(temp), first, rest, secrets.token_hex(8))
        fsync_file(temp)
        with split_lock(directory):
            return publish_local(directory, split, step, temp)
    finally:
        temp.unlink(missing_ok=True)


def publish_local(directory: Path, split: str, step: int, temp: Path) -> Path:
    """Add the finished part `temp` to the step file. Call holding the split's lock."""
    target = directory / part_name(step)
    extras = [p for p in step_parts(_LOCAL, str(directory), split, step) if p.part > 0]
    if not extras:
        try:
            os.link(temp, target)
        except FileExistsError:
            pass  # a step file: add to it below
        else:
            fsync_dir(directory)
            return target
    merged = temp_path_for(target)
    try:
        with contextlib.ExitStack() as stack:
            opened = stack.enter_context(_opened_step_file(_LOCAL, str(target)))
            current = opened[0] if opened is not None else None
            sources, folded, writes = _sources(stack, _LOCAL, str(target), current, extras)
            new = stack.enter_context(pq.ParquetFile(str(temp)))
            merge(
                [*sources, (str(temp), new)], str(merged), _footer([*writes, *_writes(new)], folded)
            )
        fsync_file(merged)
        os.replace(merged, target)
        fsync_dir(directory)
    finally:
        merged.unlink(missing_ok=True)
    for part in extras:  # the step file holds them now; readers skip them until they are gone
        os.unlink(part.path)
    if extras:
        fsync_dir(directory)
    return target


Version = tuple[int, bytes]
"""(size, last bytes) of a step file: what tells two versions apart (its footer holds every
write token)."""


@contextlib.contextmanager
def _opened_step_file(
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
        version = _tail_of(handle)
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


def _tail_of(handle: Any) -> Version:
    size = int(handle.size())
    handle.seek(max(0, size - _TAIL_BYTES))
    tail = bytes(handle.read())
    handle.seek(0)
    return size, tail


def _sources(
    stack: contextlib.ExitStack,
    filesystem: pafs.FileSystem,
    target: str,
    current: pq.ParquetFile | None,
    extras: Sequence[PartFile],
) -> tuple[list[tuple[str, pq.ParquetFile]], list[dict[str, Any]], list[str]]:
    """What the new step file starts with: the current one, then the legacy parts it does not
    hold yet (opened on `stack`), and the folded-parts entries and write tokens its footer
    must carry."""
    sources: list[tuple[str, pq.ParquetFile]] = []
    held: list[dict[str, Any]] = []
    writes: list[str] = []
    if current is not None:
        sources.append((target, current))
        held = folded_parts(current.schema_arrow.metadata)
        writes = _writes(current)
    folded = []
    for part in extras:
        identity = part_identity(filesystem, part.path)
        folded.append(identity)
        if identity not in held:
            handle = stack.enter_context(filesystem.open_input_file(part.path))
            sources.append((part.path, stack.enter_context(pq.ParquetFile(handle))))
    return sources, folded, writes


def _writes(file: pq.ParquetFile) -> list[str]:
    raw = (file.schema_arrow.metadata or {}).get(WRITES_KEY)
    try:
        tokens = json.loads(raw) if raw is not None else []
    except ValueError:
        return []
    return [t for t in tokens if isinstance(t, str)] if isinstance(tokens, list) else []


def make_dirs(directory: Path) -> None:
    """mkdir -p, fsyncing the parent of each directory created so a crash cannot lose it."""
    missing: list[Path] = []
    probe = directory
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:
            continue
        fsync_dir(path.parent)


# --- object stores ------------------------------------------------------------------------------

# One lock per split directory of a remote store: writers in this process publish there one at
# a time (processes are checked instead; see the module docstring).
_PUBLISH_LOCKS: dict[tuple[str, str], threading.Lock] = {}
_PUBLISH_LOCKS_GUARD = threading.Lock()


def _publish_lock(filesystem: pafs.FileSystem, directory: str) -> threading.Lock:
    key = (filesystem.type_name, directory)
    with _PUBLISH_LOCKS_GUARD:
        return _PUBLISH_LOCKS.setdefault(key, threading.Lock())


def make_remote_dirs(filesystem: pafs.FileSystem, directory: str) -> None:
    if filesystem.type_name not in PREFIX_ONLY:
        filesystem.create_dir(directory, recursive=True)


def write_remote(
    filesystem: pafs.FileSystem,
    directory: str,
    split: str,
    step: int,
    first: Batch,
    rest: Iterator[Batch],
) -> str:
    make_remote_dirs(filesystem, directory)
    token = secrets.token_hex(8)
    temp = _temp_name(directory, step)
    try:
        with filesystem.open_output_stream(temp) as out:  # appears whole or not at all
            write_part(out, first, rest, token)
        with _publish_lock(filesystem, directory):
            return _publish_remote(filesystem, directory, split, step, temp, token)
    finally:
        with contextlib.suppress(FileNotFoundError, OSError):
            filesystem.delete_file(temp)


def _temp_name(directory: str, step: int) -> str:
    return f"{directory}/{TEMP_PREFIX}{part_name(step)}.{os.getpid()}.{secrets.token_hex(8)}"


def _publish_remote(
    filesystem: pafs.FileSystem, directory: str, split: str, step: int, temp: str, token: str
) -> str:
    target = f"{directory}/{part_name(step)}"
    while True:
        extras = [p for p in step_parts(filesystem, directory, split, step) if p.part > 0]
        seen = _version(filesystem, target)
        if seen is None and not extras:
            filesystem.copy_file(temp, target)  # server-side; the object appears whole
        elif not _merge_remote(filesystem, target, temp, extras, seen):
            continue  # the step file changed while we built ours: build again from the new one
        if token in _remote_writes(filesystem, target):
            break
        # Another process's copy replaced ours: our groups are still in `temp`, add them again.
    for part in extras:
        with contextlib.suppress(FileNotFoundError):
            filesystem.delete_file(part.path)
    return target


def _merge_remote(
    filesystem: pafs.FileSystem,
    target: str,
    temp: str,
    extras: Sequence[PartFile],
    seen: Version | None,
) -> bool:
    """Build the new step file as a temp object and copy it over the step file, unless the
    step file is no longer the version `seen`; True when copied."""
    merged = _temp_name(target.rsplit("/", 1)[0], 0)
    try:
        with contextlib.ExitStack() as stack:
            opened = stack.enter_context(_opened_step_file(filesystem, target))
            if (opened[1] if opened is not None else None) != seen:
                return False
            current = opened[0] if opened is not None else None
            sources, folded, writes = _sources(stack, filesystem, target, current, extras)
            new = stack.enter_context(pq.ParquetFile(filesystem.open_input_file(temp)))
            footer = _footer([*writes, *_writes(new)], folded)
            with filesystem.open_output_stream(merged) as out:
                merge([*sources, (temp, new)], out, footer)
        if _version(filesystem, target) != seen:
            return False
        filesystem.copy_file(merged, target)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError, OSError):
            filesystem.delete_file(merged)


def _version(filesystem: pafs.FileSystem, path: str) -> Version | None:
    try:
        with filesystem.open_input_file(path) as handle:
            return _tail_of(handle)
    except FileNotFoundError:
        return None


def _remote_writes(filesystem: pafs.FileSystem, path: str) -> list[str]:
    with filesystem.open_input_file(path) as handle, pq.ParquetFile(handle) as file:
        return _writes(file)
