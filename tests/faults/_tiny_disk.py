"""A real small file system for the full-disk tests: a tmpfs mounted on a test's folder, filled
with a ballast file until a write finds no room, and emptied again to let the run go on.

The kernel itself answers ENOSPC, to every writer alike: Python's, safetensors' (Rust) and
parquet's (C++) — which a patched `os.write` could not reach. Mounting needs root (CI and this
project's machines run tests as root); elsewhere the tests skip, saying why.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

BALLAST = "ballast"
_CHUNK = 1 << 20


@contextlib.contextmanager
def tiny_disk(where: Path, size_mib: int) -> Iterator[Path]:
    """A tmpfs of `size_mib` MiB mounted on `where` (made if missing), unmounted afterwards."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.strip()}): needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def fill(disk: Path, leave: int = 0) -> int:
    """Take the disk's free space but about `leave` bytes with a ballast file; its size."""
    ballast = disk / BALLAST
    target = shutil.disk_usage(disk).free - leave
    written = 0
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while written < target:
            try:
                written += os.write(fd, b"\0" * min(_CHUNK, target - written))
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    finally:
        os.close(fd)
    return written


def free_up(disk: Path) -> None:
    """Give the ballast's space back."""
    (disk / BALLAST).unlink(missing_ok=True)


def files_under(folder: Path) -> dict[str, bytes]:
    """Every file below `folder` but the ballast, with its bytes."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != BALLAST
    }
