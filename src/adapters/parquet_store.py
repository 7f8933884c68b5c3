"""ParquetTrajectoryStore: logged trajectory groups as ART v2 parquet files, one file per write.

Layout: `{root}/{project}/models/{name}/trajectories/{split}/{step:04d}.parquet`, and for each
further write at the same (split, step) `{step:04d}-1.parquet`, `{step:04d}-2.parquet`, ...
ART overwrote the file instead, losing the earlier batch; here a part is published under a
name nobody holds yet, so two writers racing for one step both keep their data. What a part
holds (ART's v2 layout) is parquet_layout.py.

The root is a local directory or any pyarrow filesystem URI:

    ParquetTrajectoryStore(".art")
    ParquetTrajectoryStore("s3://bucket/prefix")   # credentials, region, endpoint: see below
    ParquetTrajectoryStore("s3://bucket/prefix", filesystem=pyarrow.fs.S3FileSystem(
        endpoint_override="localhost:9000", scheme="http", access_key=..., secret_key=...))

A URI alone gets its filesystem from `pyarrow.fs.FileSystem.from_uri`, which reads the usual
AWS environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL,
~/.aws) and URI options (`s3://bucket/prefix?endpoint_override=host:9000&scheme=http`); pass
`filesystem=` to configure it in code. With `filesystem=`, the root is a path within it
(`bucket/prefix`); a URI root there only has its scheme dropped.

Publishing a part:
- local disk: the part is written to a temp file, fsynced, and hard-linked to the first free
  name (a link fails if the name exists), so no writer, in any process, replaces another's
  part, and a crash leaves no half part.
- object stores (S3 and the rest): the part is uploaded to a uniquely named temp object (an
  upload appears whole or not at all), then copied server-side to the first name the listing
  shows free, the copy checked against the temp object, and the temp object deleted. Writers
  in one process publish one at a time; writers in different processes can still race
  between the check and the copy (milliseconds, against the whole upload for a check done
  before uploading), and if both copy to one name the later copy wins: the one whose copy was
  replaced notices, when it reads the copy back before deleting its temp object, and takes
  the next name. A part can only be lost when the other process's copy lands between that
  read-back and the delete; object stores offer no create-if-absent through pyarrow.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import json
import os
import re
import secrets
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..core.errors import CorruptDataError, InvalidInputError, UnsupportedCapability
from ..core.identity import ModelSpec, RunRef, validate_name
from ..core.trajectories import TrajectoryGroup
from ._files import TEMP_PREFIX, atomic_write_bytes, fsync_dir, publish_new, temp_path_for
from .parquet_layout import (
    BATCH_BYTES,
    FORMAT_VERSION,
    SCHEMA,
    VERSION_KEY,
    WRITE_OPTIONS,
    Batch,
    encode_batches,
    read_part,
)

if TYPE_CHECKING:
    from ..ports.trajectory_store import TrajectoryStore

__all__ = [
    "FORMAT_VERSION",
    "SCHEMA",
    "VERSION_KEY",
    "ParquetTrajectoryStore",
    "PartFile",
    "list_parts",
    "read_part",
    "resolve_root",
]

_PART_NAME = re.compile(r"([0-9]+)(?:-([1-9][0-9]*))?\.parquet")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# Filesystems where a directory is only a key prefix: nothing to create before writing.
_PREFIX_ONLY = ("s3", "gcs", "abfs")
_KNOWN_SCHEMES = frozenset({"file", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss"})
_TAIL_BYTES = 64 * 1024  # a parquet footer, and the pages before it on small parts
_LOCAL = pafs.LocalFileSystem()


class PartFile(NamedTuple):
    """A published part: its split, step and part number (0 for `0003.parquet`, n for
    `0003-n.parquet`), and its path within the store's filesystem."""

    split: str
    step: int
    part: int
    path: str


class ParquetTrajectoryStore:
    """Trajectory groups under `{root}/{project}/models/{name}/`, in ART's v2 parquet layout."""

    batch_bytes = BATCH_BYTES  # JSON per row group; a part larger than this is streamed

    def __init__(
        self, root: str | os.PathLike[str], *, filesystem: pafs.FileSystem | None = None
    ) -> None:
        self._root = root
        self._given_filesystem = filesystem
        text = os.fspath(root) if isinstance(root, str | os.PathLike) else root
        if isinstance(text, str) and _URI.match(text) and filesystem is None:
            scheme = text.split("://", 1)[0].lower()
            if scheme not in _KNOWN_SCHEMES:
                raise InvalidInputError(
                    f"cannot open the store root {text!r}: unknown scheme {scheme!r}; use a "
                    f"local path, one of {sorted(_KNOWN_SCHEMES)}, or pass filesystem="
                )
        else:  # a local path or an explicit filesystem: resolving does no I/O, check it now
            self.__dict__["_resolved"] = resolve_root(root, filesystem)

    @functools.cached_property
    def _resolved(self) -> tuple[pafs.FileSystem, str]:
        # Resolved on first use, not in __init__: resolving an object-store URI may reach the
        # network (the bucket's region), and building a store must stay free of I/O.
        return resolve_root(self._root, self._given_filesystem)

    @property
    def filesystem(self) -> pafs.FileSystem:
        return self._resolved[0]

    @property
    def base(self) -> str:
        return self._resolved[1]

    @property
    def local(self) -> bool:
        return bool(self.filesystem.type_name == "local")

    async def write(
        self, run: RunRef, split: str, step: int, groups: Sequence[TrajectoryGroup]
    ) -> str:
        _check_location(split, step)
        return await asyncio.to_thread(self._write, run, split, step, groups)

    async def read(self, run: RunRef, split: str, step: int) -> list[TrajectoryGroup]:
        _check_location(split, step)
        return await asyncio.to_thread(self._read, run, split, step)

    async def steps(self, run: RunRef, split: str) -> list[int]:
        validate_name(split, "split")
        return await asyncio.to_thread(self._steps, run, split)

    async def write_model_spec(self, spec: ModelSpec) -> None:
        try:
            data = json.dumps(spec.to_json(), indent=2, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise InvalidInputError(
                f"the config of model {spec.run} cannot be written as JSON ({error}); "
                "use plain strings, numbers, booleans, lists and dicts"
            ) from error
        path = f"{self.model_dir(spec.run)}/model.json"
        await asyncio.to_thread(self._write_spec, path, data.encode())

    async def read_model_spec(self, run: RunRef) -> dict[str, Any] | None:
        path = f"{self.model_dir(run)}/model.json"
        data = await asyncio.to_thread(self._read_spec, path)
        if data is None:
            return None
        try:
            spec = json.loads(data)
        except ValueError as error:
            raise CorruptDataError(f"{path} is not JSON ({error})") from error
        if not isinstance(spec, dict):
            raise CorruptDataError(f"{path} holds {type(spec).__name__}, not a model spec")
        return spec

    # --- where things are -------------------------------------------------------------------

    def model_dir(self, run: RunRef) -> str:
        """The model's directory, a path within `self.filesystem`."""
        return f"{self.base}/{run.project}/models/{run.name}"

    def split_dir(self, run: RunRef, split: str) -> str:
        """Where the parts of `split` live (the directory may not exist yet)."""
        return f"{self.model_dir(run)}/trajectories/{validate_name(split, 'split')}"

    def parts(
        self,
        run: RunRef,
        split: str | Iterable[str] | None = None,
        steps: int | Iterable[int] | None = None,
    ) -> list[PartFile]:
        """Every published part of the run (or of the given splits and steps), sorted by
        (split, step, part): the order they were written. Paths are within
        `self.filesystem`; read one with `read_part(part.path, store.filesystem)`."""
        return list_parts(self.filesystem, f"{self.model_dir(run)}/trajectories", split, steps)

    def part_paths(self, run: RunRef, split: str, step: int) -> list[Path]:
        """The local files of (split, step), in the order they were written. Local stores
        only; `parts` works on every filesystem."""
        _check_location(split, step)
        if not self.local:
            raise UnsupportedCapability(
                "part_paths", f"a ParquetTrajectoryStore on {self.filesystem.type_name}",
                "Use store.parts(run, split, step): paths within store.filesystem.",
            )  # fmt: skip
        return [Path(part.path) for part in self.parts(run, split, step)]

    def location(self, path: str) -> str:
        """A path within the filesystem as a user would write it: local paths as they are,
        object-store paths as URIs (`s3://bucket/key`)."""
        if self.local or self.filesystem.type_name not in (*_PREFIX_ONLY, "hdfs"):
            return path
        return f"{self.filesystem.type_name}://{path}"

    # --- writing ------------------------------------------------------------------------------

    def _write(self, run: RunRef, split: str, step: int, groups: Sequence[TrajectoryGroup]) -> str:
        batches = encode_batches(groups, self.batch_bytes)
        first = next(batches)  # the type checks and the first batch: before any file exists
        directory = self.split_dir(run, split)
        if self.local:
            return str(_write_local(Path(directory), step, first, batches))
        return self.location(_write_remote(self.filesystem, directory, step, first, batches))

    def _write_spec(self, path: str, data: bytes) -> None:
        if self.local:
            _make_dirs(Path(path).parent)
            atomic_write_bytes(Path(path), data)
            return
        _make_remote_dirs(self.filesystem, str(PurePosixPath(path).parent))
        with self.filesystem.open_output_stream(path) as out:  # one PUT: whole or nothing
            out.write(data)

    def _read_spec(self, path: str) -> bytes | None:
        try:
            if self.local:
                return Path(path).read_bytes()
            with self.filesystem.open_input_stream(path) as stream:
                data: bytes = stream.read()
                return data
        except (FileNotFoundError, NotADirectoryError):
            return None

    # --- reading ------------------------------------------------------------------------------

    def _read(self, run: RunRef, split: str, step: int) -> list[TrajectoryGroup]:
        groups: list[TrajectoryGroup] = []
        filesystem = None if self.local else self.filesystem
        for part in self.parts(run, split, step):
            groups.extend(read_part(part.path, filesystem))
        return groups

    def _steps(self, run: RunRef, split: str) -> list[int]:
        return sorted({part.step for part in self.parts(run, split)})


def resolve_root(
    root: str | os.PathLike[str], filesystem: pafs.FileSystem | None = None
) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path within it) for a store root: a local path, a URI, or a path within
    `filesystem`."""
    text = os.fspath(root)
    if not isinstance(text, str) or not text:
        raise InvalidInputError(f"the store root must be a non-empty path or URI, got {root!r}")
    is_uri = _URI.match(text) is not None
    if filesystem is None:
        if not is_uri:
            return _rooted(pafs.LocalFileSystem(), text)
        try:
            found, path = pafs.FileSystem.from_uri(text)
        except (pa.ArrowException, ValueError, OSError) as error:
            raise InvalidInputError(
                f"cannot open the store root {text!r} ({error}); pass a local path, a "
                "filesystem URI such as 's3://bucket/prefix', or filesystem="
            ) from error
        return _rooted(found, path)
    if not isinstance(filesystem, pafs.FileSystem):
        raise InvalidInputError(
            f"filesystem must be a pyarrow.fs.FileSystem, got {type(filesystem).__name__}"
        )
    if is_uri:
        text = text.split("://", 1)[1]
    return _rooted(filesystem, text)


def _rooted(filesystem: pafs.FileSystem, path: str) -> tuple[pafs.FileSystem, str]:
    """Paths are joined with `/` below the root, so the root must not end in one."""
    if filesystem.type_name == "local":
        return filesystem, os.path.normpath(path)
    return filesystem, path.rstrip("/")


def _check_location(split: str, step: int) -> None:
    validate_name(split, "split")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidInputError(f"step must be an integer >= 0, got {step!r}")


def _part_name(step: int, part: int) -> str:
    return f"{step:04d}.parquet" if part == 0 else f"{step:04d}-{part}.parquet"


def parse_part_name(name: str) -> tuple[int, int] | None:
    """(step, part) of a file name this store writes, else None (temp files, `12.parquet`,
    `0008-0.parquet` and any other name are not parts)."""
    if name.startswith(TEMP_PREFIX):
        return None
    match = _PART_NAME.fullmatch(name)
    if match is None:
        return None
    step = int(match.group(1))
    if f"{step:04d}" != match.group(1):
        return None
    return step, int(match.group(2) or 0)


def list_parts(
    filesystem: pafs.FileSystem,
    trajectories_dir: str,
    split: str | Iterable[str] | None = None,
    steps: int | Iterable[int] | None = None,
) -> list[PartFile]:
    """The published parts under a model's `trajectories/` directory (a path within
    `filesystem`), sorted by (split, step, part). Files being written and names the store
    does not write are skipped, so a part is listed whole or not at all."""
    splits = _as_set(split, str, "split")
    wanted = _as_set(steps, int, "steps")
    for name in splits or ():
        validate_name(name, "split")
    if splits is None:
        dirs = [
            info.base_name
            for info in _list_dir(filesystem, trajectories_dir)
            if info.type == pafs.FileType.Directory and not info.base_name.startswith(".")
        ]
    else:
        dirs = sorted(splits)
    found: list[PartFile] = []
    for split_name in dirs:
        directory = f"{trajectories_dir}/{split_name}"
        for info in _list_dir(filesystem, directory):
            parsed = parse_part_name(info.base_name)
            if parsed is None or info.type != pafs.FileType.File:
                continue
            if wanted is not None and parsed[0] not in wanted:
                continue
            found.append(
                PartFile(split_name, parsed[0], parsed[1], f"{directory}/{info.base_name}")
            )
    found.sort()
    return found


def _list_dir(filesystem: pafs.FileSystem, directory: str) -> list[pafs.FileInfo]:
    if filesystem.type_name == "local":  # scandir: one system call, no stat per entry
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [
            pafs.FileInfo(
                entry.path,
                pafs.FileType.Directory
                if entry.is_dir()
                else pafs.FileType.File
                if entry.is_file()
                else pafs.FileType.Unknown,
            )
            for entry in entries
        ]
    selector = pafs.FileSelector(directory, allow_not_found=True)
    return list(filesystem.get_file_info(selector))


def _as_set(value: Any, kind: type, what: str) -> set[Any] | None:
    if value is None:
        return None
    if isinstance(value, kind) and not isinstance(value, bool):
        return {value}
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidInputError(
            f"{what} must be a {kind.__name__} or an iterable of them, got {value!r:.100}"
        )
    items = list(value)
    bad = [item for item in items if not isinstance(item, kind) or isinstance(item, bool)]
    if bad:
        raise InvalidInputError(f"{what} must hold only {kind.__name__} values, got {bad[:3]!r}")
    return set(items)


def _taken(filesystem: pafs.FileSystem, directory: str, step: int) -> list[int]:
    found = []
    for info in _list_dir(filesystem, directory):
        parsed = parse_part_name(info.base_name)
        if parsed is not None and parsed[0] == step:
            found.append(parsed[1])
    return found


def _candidates(filesystem: pafs.FileSystem, directory: str, step: int) -> Iterator[str]:
    """Free-looking names for a new part: after the newest, so parts keep write order even if
    an earlier one is gone."""
    taken = _taken(filesystem, directory, step)
    start = max(taken) + 1 if taken else 0
    return (f"{directory}/{_part_name(step, part)}" for part in itertools.count(start))


# --- streaming a part out -------------------------------------------------------------------


def _write_part(sink: Any, first: Batch, rest: Iterator[Batch]) -> None:
    """Write the part to `sink`: a local path (never parsed as a URI) or an output stream.

    A part of one batch is one `write_table`. A larger part is streamed: batch k is encoded,
    compressed and written on a helper thread while batch k+1 is serialized here. Serializing
    holds the GIL; parquet encoding, zstd and the writes release it, so with two cores the
    part costs about its serialization alone, and at most two batches are in memory at once
    (the one being written and the one being built)."""
    options = dict(WRITE_OPTIONS, filesystem=_LOCAL) if isinstance(sink, str) else WRITE_OPTIONS
    if first.last:
        pq.write_table(first.table, sink, **options)
        return
    with (
        pq.ParquetWriter(sink, SCHEMA, **options) as writer,
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


def _write_local(directory: Path, step: int, first: Batch, rest: Iterator[Batch]) -> Path:
    _make_dirs(directory)
    temp = temp_path_for(directory / _part_name(step, 0))
    try:
        _write_part(str(temp), first, rest)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    candidates = (Path(name) for name in _candidates(_LOCAL, str(directory), step))
    # A name taken meanwhile by a concurrent writer is skipped by publish_new.
    return publish_new(temp, candidates)


def _make_dirs(directory: Path) -> None:
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


# One lock per split directory of a remote store: writers in this process publish there one at
# a time, so they never race each other for a name (processes still can; see the docstring).
_PUBLISH_LOCKS: dict[tuple[str, str], threading.Lock] = {}
_PUBLISH_LOCKS_GUARD = threading.Lock()


def _publish_lock(filesystem: pafs.FileSystem, directory: str) -> threading.Lock:
    key = (filesystem.type_name, directory)
    with _PUBLISH_LOCKS_GUARD:
        return _PUBLISH_LOCKS.setdefault(key, threading.Lock())


def _make_remote_dirs(filesystem: pafs.FileSystem, directory: str) -> None:
    if filesystem.type_name not in _PREFIX_ONLY:
        filesystem.create_dir(directory, recursive=True)


def _write_remote(
    filesystem: pafs.FileSystem,
    directory: str,
    step: int,
    first: Batch,
    rest: Iterator[Batch],
) -> str:
    _make_remote_dirs(filesystem, directory)
    temp = f"{directory}/{TEMP_PREFIX}{_part_name(step, 0)}.{os.getpid()}.{secrets.token_hex(8)}"
    try:
        with filesystem.open_output_stream(temp) as out:
            _write_part(out, first, rest)
        with _publish_lock(filesystem, directory):
            return _publish_remote(filesystem, temp, directory, step)
    finally:
        with contextlib.suppress(FileNotFoundError, OSError):
            filesystem.delete_file(temp)


def _publish_remote(filesystem: pafs.FileSystem, temp: str, directory: str, step: int) -> str:
    size = filesystem.get_file_info(temp).size
    ours = _tail(filesystem, temp)
    while True:
        candidate = next(
            name
            for name in _candidates(filesystem, directory, step)
            if filesystem.get_file_info(name).type == pafs.FileType.NotFound
        )
        filesystem.copy_file(temp, candidate)  # server-side; the object appears whole
        if (
            filesystem.get_file_info(candidate).size == size
            and _tail(filesystem, candidate) == ours
        ):
            return candidate
        # Another process's copy replaced ours; the name is taken now, so the next listing
        # starts after it.


def _tail(filesystem: pafs.FileSystem, path: str) -> bytes:
    with filesystem.open_input_file(path) as file:
        size = file.size()
        file.seek(max(0, size - _TAIL_BYTES))
        return bytes(file.read())


if TYPE_CHECKING:
    _fits: type[TrajectoryStore] = ParquetTrajectoryStore
