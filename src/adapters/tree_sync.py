"""Make one folder tree like another, on the local disk or an object store (S3 through
pyarrow's filesystem), with `aws s3 sync`'s rules and none of its processes.

A file is copied when the destination lacks it, its size differs, or the source's copy was
modified later; with `delete`, destination files the source lacks are removed (but never all
of them because the source is empty: that is refused, as a mistyped source most likely). An excluded
top-level folder (`checkpoints` excludes `checkpoints/*`) is neither copied nor deleted on
either side. Empty folders are not copied (an object store has none).

What arthex adds, so that a reader on either side only ever sees whole checkpoints (a
`checkpoints/{step:04d}` folder counts once its completeness marker is there:
`adapters/local/checkpoints.py`):

- the markers (`trainer_state.json`, the adapter files) are copied after every other file and
  deleted before them;
- a local file appears whole or not at all (written beside it under a temp name, renamed);
- what belongs to one machine is never copied or deleted: the temp names of writes in
  progress (`.tmp-*`, at any depth) and lock files (`*.lock`: the trajectory store's split
  locks, the run state's lock).

Each object-store call is tried again while the store is busy or down, for the retry budget
(`parquet/retrying.py`, the same rules as the trajectory store); any failure ends the sync
with TreeSyncError, one line naming the operation and the bucket/key.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import attrs
import pyarrow.fs as pafs

from ..core.errors import ArthexError, StoreUnavailableError
from .files import TEMP_PREFIX, atomic_temp, fsync_dir
from .local.checkpoints import ADAPTER_FILES, STATE_FILE
from .parquet.object_store import PREFIX_ONLY
from .parquet.retrying import DEFAULT_RETRY_BUDGET, within_budget
from .parquet.store import resolve_root

__all__ = [
    "MARKERS",
    "Entry",
    "Tree",
    "TreeSyncError",
    "copy_one",
    "excluded",
    "list_tree",
    "remove_tree",
    "store_call",
    "sync_tree",
]

R = TypeVar("R")

MARKERS = frozenset({STATE_FILE, *ADAPTER_FILES})  # the files that make a checkpoint whole
LOCK_SUFFIX = ".lock"  # `parquet/local_disk.LOCK_FILE`, `run_files/state.LOCK_SUFFIX`
_CHUNK = 8 << 20


class TreeSyncError(ArthexError, RuntimeError):
    """A copy, deletion or listing of a sync failed; the one line names it and the key."""


@attrs.frozen
class Entry:
    """A file of a tree: its size and its modification time (ns)."""

    size: int
    mtime_ns: int


@attrs.frozen
class Tree:
    """The root of a tree: a local folder (`filesystem` None) or a path within a filesystem."""

    path: str
    filesystem: pafs.FileSystem | None = None

    @classmethod
    def of(cls, where: str, filesystem: pafs.FileSystem | None = None) -> Tree:
        """A local path, or a filesystem URI (`s3://bucket/prefix`, its filesystem from the
        AWS environment as the trajectory store reads it) or a path within `filesystem`."""
        if filesystem is None and "://" not in where:
            return cls(os.path.abspath(where))
        found, path = resolve_root(where, filesystem)
        if found.type_name == "local":
            return cls(path)
        return cls(path, found)

    @property
    def local(self) -> bool:
        return self.filesystem is None

    def join(self, relative: str) -> str:
        return f"{self.path}/{relative}" if relative else self.path

    def label(self, relative: str = "") -> str:
        """How a message names a file of the tree: `s3://bucket/key`, or the local path."""
        path = self.join(relative)
        if self.filesystem is None or self.filesystem.type_name not in PREFIX_ONLY:
            return path
        return f"{self.filesystem.type_name}://{path}"


def _skipped(relative: str) -> bool:
    parts = relative.split("/")
    return parts[-1].endswith(LOCK_SUFFIX) or any(p.startswith(TEMP_PREFIX) for p in parts)


def list_tree(tree: Tree, budget: float = DEFAULT_RETRY_BUDGET) -> dict[str, Entry]:
    """Every file below `tree`, by its path relative to the root (`/`-separated); nothing
    when the root does not exist. Writes in progress and lock files are left out."""
    if tree.local:
        return _list_local(Path(tree.path))
    filesystem = tree.filesystem
    assert filesystem is not None
    selector = pafs.FileSelector(tree.path, recursive=True, allow_not_found=True)
    infos = store_call(
        f"listing {tree.label()}/", lambda: filesystem.get_file_info(selector), budget
    )
    files: dict[str, Entry] = {}
    for info in infos:
        relative = info.path[len(tree.path) + 1 :]
        if info.type == pafs.FileType.File and relative and not _skipped(relative):
            files[relative] = Entry(int(info.size or 0), int(info.mtime_ns or 0))
    return files


def _list_local(root: Path) -> dict[str, Entry]:
    files: dict[str, Entry] = {}
    if not root.is_dir():
        return files
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(TEMP_PREFIX)]
        for name in names:
            path = Path(folder, name)
            if name.startswith(TEMP_PREFIX) or name.endswith(LOCK_SUFFIX) or not path.is_file():
                continue
            stat = path.stat()
            files[path.relative_to(root).as_posix()] = Entry(stat.st_size, stat.st_mtime_ns)
    return files


def excluded(relative: str, exclude: Collection[str]) -> bool:
    """`aws s3 sync --exclude '{folder}/*'` for each folder: the file is below one of them."""
    return any(relative.startswith(f"{folder}/") for folder in exclude)


def _markers_last(paths: Iterable[str]) -> list[str]:
    return sorted(paths, key=lambda p: (p.rsplit("/", 1)[-1] in MARKERS, p))


def _differs(source: Entry, destination: Entry) -> bool:
    """Another size, or a later modification in whole seconds (what an object store keeps; a
    pulled file gets its object's time, so the next pull skips it)."""
    later = source.mtime_ns // 1_000_000_000 > destination.mtime_ns // 1_000_000_000
    return source.size != destination.size or later


def sync_tree(
    source: Tree,
    destination: Tree,
    *,
    delete: bool = False,
    exclude: Collection[str] = (),
    budget: float = DEFAULT_RETRY_BUDGET,
    report: Callable[[str], None] | None = None,
) -> tuple[list[str], list[str]]:
    """Make `destination` like `source` (the module docstring says how); the relative paths
    copied and deleted, in the order done. `report` hears one line per file."""
    if source.local and not os.path.isdir(source.path):
        raise TreeSyncError(f"syncing {source.label()} failed: it is not a folder")
    theirs = list_tree(source, budget)
    ours = list_tree(destination, budget)
    if delete and not theirs and any(not excluded(p, exclude) for p in ours):
        raise TreeSyncError(
            f"syncing {source.label()}/ to {destination.label()}/ with delete failed: the source "
            "holds no files, so every file there would go (a mistyped name?); nothing was "
            "deleted. Delete them yourself if that is meant"
        )
    wanted = {p: e for p, e in theirs.items() if not excluded(p, exclude)}
    copies = [p for p, entry in wanted.items() if p not in ours or _differs(entry, ours[p])]
    copied: list[str] = []
    for relative in _markers_last(copies):
        _copy(source, destination, relative, wanted[relative], budget)
        copied.append(relative)
        if report is not None:
            report(f"copy: {source.label(relative)} to {destination.label(relative)}")
    gone = [p for p in ours if p not in theirs and not excluded(p, exclude)] if delete else []
    deleted: list[str] = []
    for relative in reversed(_markers_last(gone)):  # markers first: no longer whole, then empty
        _delete(destination, relative, budget)
        deleted.append(relative)
        if report is not None:
            report(f"delete: {destination.label(relative)}")
    return copied, deleted


def copy_one(source: Tree, destination: Tree, budget: float = DEFAULT_RETRY_BUDGET) -> None:
    """Copy the single file `source` to the file `destination` (`aws s3 cp`)."""
    if source.local:
        if not os.path.isfile(source.path):
            raise TreeSyncError(f"copying {source.label()} failed: it is not a file")
        stat = os.stat(source.path)
        entry = Entry(stat.st_size, stat.st_mtime_ns)
    else:
        filesystem = source.filesystem
        assert filesystem is not None
        info = store_call(
            f"reading {source.label()}", lambda: filesystem.get_file_info(source.path), budget
        )
        if info.type != pafs.FileType.File:
            raise TreeSyncError(f"copying {source.label()} failed: it is not a file")
        entry = Entry(int(info.size or 0), int(info.mtime_ns or 0))
    _copy(source, destination, "", entry, budget)


def _copy(source: Tree, destination: Tree, relative: str, entry: Entry, budget: float) -> None:
    what = f"copying {source.label(relative)} to {destination.label(relative)}"
    from_path, to_path = source.join(relative), destination.join(relative)

    def attempt() -> None:
        with _opened(source, from_path) as reader:
            if destination.local:
                target = Path(to_path)
                with atomic_temp(target) as temp:
                    with open(temp, "wb") as out:
                        _pump(reader, out.write)
                    if not source.local:  # as `aws s3 sync` does: the next pull skips it
                        os.utime(temp, ns=(entry.mtime_ns, entry.mtime_ns))
            else:
                filesystem = destination.filesystem
                assert filesystem is not None
                if filesystem.type_name not in PREFIX_ONLY:
                    filesystem.create_dir(to_path.rsplit("/", 1)[0], recursive=True)
                with filesystem.open_output_stream(to_path) as out:  # appears whole
                    _pump(reader, out.write)

    store_call(what, attempt, budget)


class _Reader(Protocol):  # what `_pump` needs of a local file or a pyarrow stream
    def read(self, size: int, /) -> bytes: ...


@contextlib.contextmanager
def _opened(tree: Tree, path: str) -> Iterator[_Reader]:
    if tree.filesystem is None:
        with open(path, "rb") as handle:
            yield handle
    else:
        with tree.filesystem.open_input_stream(path) as stream:
            yield stream


def _pump(reader: _Reader, write: Callable[[bytes], object]) -> None:
    while chunk := reader.read(_CHUNK):
        write(chunk)


def _delete(tree: Tree, relative: str, budget: float) -> None:
    path = tree.join(relative)
    if tree.filesystem is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        _prune_empty(Path(tree.path), Path(path).parent)
        return
    filesystem = tree.filesystem

    def attempt() -> None:
        with contextlib.suppress(FileNotFoundError):
            filesystem.delete_file(path)

    store_call(f"deleting {tree.label(relative)}", attempt, budget)


def _prune_empty(root: Path, folder: Path) -> None:
    """Remove `folder` and its parents up to `root` while empty: a deleted checkpoint's files
    leave no digit-named folder behind."""
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        fsync_dir(folder.parent)
        folder = folder.parent


def store_call(what: str, call: Callable[[], R], budget: float) -> R:
    """`call()` within the retry budget; any failure as TreeSyncError, one line naming
    `what` (the operation and its key)."""
    try:
        return within_budget(what, lambda _: call(), budget)
    except StoreUnavailableError as error:
        raise TreeSyncError(str(error)) from error
    except OSError as error:
        cause = " ".join(str(error).split())[:300]
        raise TreeSyncError(f"{what} failed: {cause}") from error


def remove_tree(tree: Tree, budget: float = DEFAULT_RETRY_BUDGET) -> list[str]:
    """Delete every file below `tree`, markers first; the relative paths deleted."""
    gone = list(list_tree(tree, budget))
    for relative in reversed(_markers_last(gone)):
        _delete(tree, relative, budget)
    if tree.local:
        shutil.rmtree(tree.path, ignore_errors=True)
    return gone
