"""Durable file writes shared by the file adapters: temp file, fsync, rename, directory fsync."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

TEMP_PREFIX = ".tmp-"


def temp_path_for(path: Path) -> Path:
    """A temp name beside `path`; readers skip names starting with TEMP_PREFIX."""
    return path.with_name(f"{TEMP_PREFIX}{path.name}.{os.getpid()}.{secrets.token_hex(4)}")


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_temp(path: Path) -> Iterator[Path]:
    """Yield a temp path to write; on success it is fsynced and renamed over `path`, and the
    directory fsynced. On failure the temp file is removed and `path` is untouched."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_path_for(path)
    try:
        yield temp
        fsync_file(temp)
        os.replace(temp, path)
        fsync_dir(path.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    with atomic_temp(path) as temp:
        temp.write_bytes(data)


def publish_new(temp: Path, candidates: Iterator[Path]) -> Path:
    """Give a finished, fsynced temp file the first candidate name that does not exist yet,
    without ever replacing an existing file (a hard link fails if the name is taken), so two
    writers racing for one name both keep their data."""
    fsync_file(temp)
    try:
        for candidate in candidates:
            try:
                os.link(temp, candidate)
            except FileExistsError:
                continue
            fsync_dir(candidate.parent)
            return candidate
        raise FileExistsError(f"no free name for {temp}")
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()


def fsync_file(path: Path) -> None:
    """fsync a file's data and metadata (by path; the file stays closed afterwards)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
