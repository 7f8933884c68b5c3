"""Durable file writes shared by the file adapters: temp file, fsync, rename, directory fsync;
locks; the disk use of a folder; a full disk said in one line (`disk_full`)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from ..core.errors import DiskFullError, InvalidInputError

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


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# how libraries that do their own I/O (safetensors in Rust, parquet in C++) word the errno
_NO_SPACE_WORDS = ("no space left on device", "os error 28", "errno 28", "disk quota exceeded")


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` is a write that found its disk full (or over quota), whichever layer
    raised it."""
    if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
        return True
    text = str(exc).lower()
    return any(words in text for words in _NO_SPACE_WORDS)


def free_bytes(path: Path) -> int:
    """Free bytes on the disk that holds `path` (or would hold it: the nearest existing folder
    above), for an unprivileged writer."""
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return 0


def disk_full(path: Path, needed: int) -> DiskFullError:
    """The one-line error for a write of `needed` bytes to `path` that did not fit: what to
    free, and that running the script again resumes (nothing half-written was kept)."""
    free = free_bytes(path)
    short = needed - free  # not positive when the disk filled up and emptied again since
    what = f"free at least {_size(short)} there" if short > 0 else "free space there"
    return DiskFullError(
        f"no space left on the disk of {path}: the write needs {_size(needed)}, "
        f"{_size(free)} free; {what} (old "
        "checkpoints: `arthex prune --yes` or model.delete_checkpoints(); old runs, caches) or "
        "move base_path to a larger disk, then run the script again: it resumes where it stopped"
    )


@contextlib.contextmanager
def full_disk_said(path: Path, needed: int | Callable[[], int]) -> Iterator[None]:
    """Turn a full disk inside the block into `disk_full(path, needed)` (`needed` may be
    computed when it happens: the bytes a write had got through, say); other errors pass."""
    try:
        yield
    except DiskFullError:
        raise
    except Exception as exc:
        if not is_disk_full(exc):
            raise
        raise disk_full(path, needed() if callable(needed) else needed) from exc


def _size(count: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit} ({count} bytes)"
    return f"{count} bytes"


@contextlib.contextmanager
def atomic_temp(path: Path, needed: int | None = None) -> Iterator[Path]:
    """Yield a temp path to write; on success it is fsynced and renamed over `path`, and the
    directory fsynced. On failure the temp file is removed and `path` is untouched; a full
    disk is said as DiskFullError naming `path` and `needed` bytes (when not given: what the
    temp file had reached)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_path_for(path)

    def reached() -> int:
        return needed if needed is not None else _file_size(temp) + 1

    try:
        with full_disk_said(path, reached):
            yield temp
            fsync_file(temp)
            os.replace(temp, path)
            fsync_dir(path.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def atomic_write_bytes(path: Path, data: bytes) -> None:
    with atomic_temp(path, len(data)) as temp:
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
        with full_disk_said(target, lambda: disk_use(temp) + 1):
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
