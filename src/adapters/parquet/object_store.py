"""Publishing a write on an object store: S3 and the rest (step_file.py says what a write
does to the step file).

pyarrow offers no lock and no create-if-absent there, so writers in one process are
serialized by an in-process lock, and writers in different processes are checked, not
locked: a writer records the step file it read (size and last bytes), builds the new file as
a temp object, checks right before the server-side copy that the step file is still the one it
read (else it starts over from the new one), and after the copy reads the step file's footer
back: its write token (`arthex.writes`) must be there, or it starts over. The one loss left is
two processes passing that check within the same milliseconds: the later copy then wins. Use
one writing process per (split, step) on an object store, or a local disk, when that matters.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import Iterator, Sequence

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..files import TEMP_PREFIX
from .encoding import Batch
from .parts import PartFile, part_name, step_parts
from .step_file import (
    Version,
    merge,
    opened_step_file,
    rewrite_sources,
    step_file_version,
    write_part,
    write_tokens,
)

__all__ = ["PREFIX_ONLY", "make_remote_dirs", "new_token", "write_remote"]

# Filesystems where a directory is only a key prefix: nothing to create before writing.
PREFIX_ONLY = ("s3", "gcs", "abfs")
_PUBLISH_ATTEMPTS = 20  # rounds of a writer on an object store losing the race, before it gives up

# One lock per split directory of a remote store: writers in this process publish there one at
# a time (processes are checked instead; see the module docstring).
_PUBLISH_LOCKS: dict[tuple[str, str], threading.Lock] = {}
_PUBLISH_LOCKS_GUARD = threading.Lock()


def _publish_lock(filesystem: pafs.FileSystem, directory: str) -> threading.Lock:
    key = (filesystem.type_name, directory)
    with _PUBLISH_LOCKS_GUARD:
        return _PUBLISH_LOCKS.setdefault(key, threading.Lock())


def read_file(filesystem: pafs.FileSystem, path: str, *, local: bool) -> bytes | None:
    """A whole file's bytes (a local path read directly), None when it does not exist."""
    try:
        if local:
            with open(path, "rb") as handle:
                return handle.read()
        with filesystem.open_input_stream(path) as stream:
            data: bytes = stream.read()
            return data
    except (FileNotFoundError, NotADirectoryError):
        return None


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
    token: str | None = None,
    retried: bool = False,
) -> str:
    """Add the groups to the step file; returns its path. A write tried again passes the
    `token` of its first attempt and `retried`: when that attempt's groups are already in the
    step file (it landed, but its reply was lost) nothing is added a second time."""
    make_remote_dirs(filesystem, directory)
    target = f"{directory}/{part_name(step)}"
    token = token or new_token()
    if retried and token in _remote_writes(filesystem, target):
        return target
    temp = _temp_name(directory, step)
    try:
        with filesystem.open_output_stream(temp) as out:  # appears whole or not at all
            write_part(out, first, rest, token)
        with _publish_lock(filesystem, directory):
            return _publish_remote(filesystem, directory, split, step, temp, token)
    finally:
        with contextlib.suppress(FileNotFoundError, OSError):
            filesystem.delete_file(temp)


def new_token() -> str:
    return secrets.token_hex(8)


def _temp_name(directory: str, step: int) -> str:
    return f"{directory}/{TEMP_PREFIX}{part_name(step)}.{os.getpid()}.{secrets.token_hex(8)}"


def _publish_remote(
    filesystem: pafs.FileSystem, directory: str, split: str, step: int, temp: str, token: str
) -> str:
    target = f"{directory}/{part_name(step)}"
    for _ in range(_PUBLISH_ATTEMPTS):
        extras = [p for p in step_parts(filesystem, directory, split, step) if p.part > 0]
        seen = step_file_version(filesystem, target)
        if seen is None and not extras:
            filesystem.copy_file(temp, target)  # server-side; the object appears whole
        elif not _merge_remote(filesystem, target, temp, extras, seen):
            continue  # the step file changed while we built ours: build again from the new one
        if token in _remote_writes(filesystem, target):
            break
        # Another process's copy replaced ours: our groups are still in `temp`, add them again.
    else:
        raise OSError(
            f"could not add groups to {target}: other writers replaced it {_PUBLISH_ATTEMPTS} "
            "times in a row; nothing of this write is in it. Write again"
        )
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
            opened = stack.enter_context(opened_step_file(filesystem, target))
            if (opened[1] if opened is not None else None) != seen:
                return False
            current = opened[0] if opened is not None else None
            sources, footer = rewrite_sources(stack, filesystem, target, current, extras, temp)
            with filesystem.open_output_stream(merged) as out:
                merge(sources, out, footer)
        if step_file_version(filesystem, target) != seen:
            return False
        filesystem.copy_file(merged, target)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError, OSError):
            filesystem.delete_file(merged)


def _remote_writes(filesystem: pafs.FileSystem, path: str) -> list[str]:
    try:
        with filesystem.open_input_file(path) as handle, pq.ParquetFile(handle) as file:
            return write_tokens(file)
    except FileNotFoundError:
        return []
