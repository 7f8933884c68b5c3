"""Publishing a write on a local disk (step_file.py says what a write does to the step file).

Locking: the lock is `trajectories/{split}/.lock`, taken with `flock`, so writers in every
process on the machine (and on NFS, which maps flock to its byte-range locks) are serialized;
the kernel releases it when a writer dies. Writers of different splits never wait on each
other. ART's loaders list `*.parquet` only, so the lock file is invisible to them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs

from ..files import exclusive_lock, fsync_dir, fsync_file, full_disk_said, temp_path_for
from .encoding import Batch
from .parts import part_name, step_parts
from .step_file import merge, opened_step_file, rewrite_sources, write_part

__all__ = ["LOCK_FILE", "make_dirs", "publish_local", "split_lock", "write_local"]

LOCK_FILE = ".lock"
_LOCAL = pafs.LocalFileSystem()


@contextlib.contextmanager
def split_lock(directory: Path) -> Iterator[None]:
    """The split's writer lock: `flock` on `{directory}/.lock`, released on exit or death."""
    with exclusive_lock(directory / LOCK_FILE):
        yield


def write_local(
    directory: Path, split: str, step: int, first: Batch, rest: Iterator[Batch]
) -> Path:
    target = directory / part_name(step)
    temp = temp_path_for(target)

    def reached() -> int:  # what the part had got to when the disk filled
        written = temp.stat().st_size if temp.exists() else 0
        return max(written + 1, int(first.table.nbytes))

    try:
        with full_disk_said(target, reached):
            make_dirs(directory)
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
            opened = stack.enter_context(opened_step_file(_LOCAL, str(target)))
            current = opened[0] if opened is not None else None
            sources, footer = rewrite_sources(
                stack, _LOCAL, str(target), current, extras, str(temp)
            )
            merge(sources, str(merged), footer)
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
