"""Durable file writes shared by the file adapters: temp file, fsync, rename, directory fsync;
locks; the disk use of a folder."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from ..core.errors import InvalidInputError

TEMP_PREFIX = ".tmp-"


class UnwritableDirectoryError(InvalidInputError, PermissionError):
    """The run's directory cannot be written: read-only, not a directory, or no permission."""


def unwritable_directory_error(directory: Path, cause: OSError | None = None) -> InvalidInputError:
    """One clear error naming the directory, instead of the OS errors of the first write that
    needed it (each wrapped in the next)."""
    reason = f" ({cause.strerror or cause})" if cause is not None else ""
    return UnwritableDirectoryError(
        f"cannot write the run's files under {directory}{reason}: make it writable, or pass a "
        "base_path you can write to"
    )


def check_writable_directory(directory: Path) -> None:
    """Raise UnwritableDirectoryError when `directory` (or, while it does not exist yet, the
    nearest existing folder above it, where it would be created) cannot be written. Writes
    nothing: `os.access` asks the kernel, which also knows read-only mounts and immutable
    folders."""
    probe = directory
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise unwritable_directory_error(directory, NotADirectoryError(0, f"{probe} is a file"))
    if not os.access(probe, os.W_OK | os.X_OK):
        raise unwritable_directory_error(directory, PermissionError(0, f"{probe} is read-only"))


def temp_path_for(path: Path) -> Path:
    """A temp name beside `path`; readers skip names starting with TEMP_PREFIX."""
    return path.with_name(f"{TEMP_PREFIX}{path.name}.{os.getpid()}.{secrets.token_hex(4)}")


def fsync_dir(directory: Path) -> None:
    """fsync a directory (after a rename or an unlink in it, so the entry is durable)."""
    _fsync(directory, os.O_RDONLY | os.O_DIRECTORY)


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, flags)
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


@contextlib.contextmanager
def new_folder(target: Path) -> Iterator[Path]:
    """Yield a temp folder beside `target` to fill; on success it is renamed to `target`, which
    must not exist or be an empty folder (checked first, before anything is written). On failure
    the temp folder is removed and `target` is untouched."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InvalidInputError(
            f"{target} already exists and is not an empty folder (a file, or a folder that is "
            "not empty); write into a new folder"
        )
    temp = temp_path_for(target)
    temp.mkdir(parents=True)
    try:
        yield temp
        if target.exists():
            target.rmdir()  # checked empty above
        os.rename(temp, target)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def readable_like_new_files(folder: Path) -> None:
    """Give every file in `folder` the mode a new file gets here (0644 under the usual umask):
    a library that writes through a private temp file (0600) would otherwise leave one file
    of a folder readable by its owner only."""
    probe = folder / ".mode-probe"
    os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        mode = stat.S_IMODE(probe.stat().st_mode)
    finally:
        probe.unlink()
    for path in folder.iterdir():
        if path.is_file() and not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) != mode:
            path.chmod(mode)


def fsync_file(path: Path) -> None:
    """fsync a file's data and metadata (by path; the file stays closed afterwards)."""
    _fsync(path, os.O_RDONLY)


def disk_use(path: Path) -> int:
    """Bytes of the regular files below `path` (links are not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for file in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, file)).st_size
    return total


@contextlib.contextmanager
def exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Hold `flock(LOCK_EX)` on `lock_path` (created if missing) until the block ends; the
    lock also ends with the process, so a killed holder never blocks the next one."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock
