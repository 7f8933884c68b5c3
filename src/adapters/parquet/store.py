"""ParquetTrajectoryStore: logged trajectory groups as ART v2 parquet, one file per step.

Layout: `{root}/{project}/models/{name}/trajectories/{split}/{step:04d}.parquet` holds every
group logged at (split, step), in write order. A second write at a step rewrites the file
atomically as old + new under the split's lock, so nothing is ever lost and ART's loaders,
which read only `NNNN.parquet`, see every trajectory (ART itself overwrote the file, losing
the earlier batch). What a write does to the step file is step_file.py; how it is published
and concurrent writers are serialized is local_disk.py and object_store.py; part names,
listing and the legacy `-N` parts of earlier arthex versions are parts.py; what a file holds
(ART's v2 layout) is schema.py, with groups made rows in encoding.py (their JSON cells in
json_cells.py) and rows made groups again in decoding.py.

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

On an object store every write, read and listing is tried again, with doubling waits, while
the store answers 5xx/SlowDown/429 or the connection fails, for `retry_budget` seconds (60 by
default; on top of the filesystem's own `retry_strategy`); then it fails with one
StoreUnavailableError line naming the key and the budget (retrying.py). A write tried again
never adds its groups twice, even when an earlier attempt landed and only its reply was lost.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from ...core.errors import InvalidInputError, UnsupportedCapability
from ...core.identity import ModelSpec, RunRef, validate_name
from ...core.trajectories import TrajectoryGroup
from ..files import atomic_write_bytes
from ..layout import RunLayout
from .decoding import json_object, read_part
from .encoding import BATCH_BYTES, Batch, encode_batches
from .local_disk import make_dirs, write_local
from .object_store import PREFIX_ONLY, make_remote_dirs, new_token, read_file, write_remote
from .parts import PartFile, list_parts, parse_part_name, part_name, read_step
from .retrying import DEFAULT_RETRY_BUDGET, check_budget, within_budget
from .schema import FORMAT_VERSION, SCHEMA, VERSION_KEY

if TYPE_CHECKING:
    from ...ports.trajectory_store import TrajectoryStore

__all__ = [
    "FORMAT_VERSION",
    "SCHEMA",
    "VERSION_KEY",
    "ParquetTrajectoryStore",
    "PartFile",
    "list_parts",
    "parse_part_name",
    "read_part",
    "resolve_root",
]

R = TypeVar("R")

_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_KNOWN_SCHEMES = frozenset({"file", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss"})


class ParquetTrajectoryStore:
    """Trajectory groups under `{root}/{project}/models/{name}/`, in ART's v2 parquet layout."""

    batch_bytes = BATCH_BYTES  # JSON per row group; a part larger than this is streamed

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        filesystem: pafs.FileSystem | None = None,
        retry_budget: float = DEFAULT_RETRY_BUDGET,
    ) -> None:
        self.retry_budget = check_budget(retry_budget)
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
        return json_object(path, data, "a model spec")

    # --- where things are -------------------------------------------------------------------

    def model_dir(self, run: RunRef) -> str:
        """The model's directory, a path within `self.filesystem`."""
        return RunLayout.of(self.base, run).uri

    def split_dir(self, run: RunRef, split: str) -> str:
        """Where the parts of `split` live (the directory may not exist yet)."""
        return f"{self.model_dir(run)}/trajectories/{validate_name(split, 'split')}"

    def parts(
        self,
        run: RunRef,
        split: str | Iterable[str] | None = None,
        steps: int | Iterable[int] | None = None,
    ) -> list[PartFile]:
        """The part files of the run (or of the given splits and steps), sorted by (split,
        step, part): the step files, and legacy `-N` parts not yet folded into theirs. Paths
        are within `self.filesystem`; read one with `read_part(part.path, store.filesystem)`."""
        where = f"{self.model_dir(run)}/trajectories"
        return self._remote(
            f"listing {self.location(where)}",
            lambda _: list_parts(self.filesystem, where, split, steps),
        )

    def part_paths(self, run: RunRef, split: str, step: int) -> list[Path]:
        """The local files of (split, step): the step file, and legacy parts not yet folded
        into it. Local stores only; `parts` works on every filesystem."""
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
        if self.local or self.filesystem.type_name not in (*PREFIX_ONLY, "hdfs"):
            return path
        return f"{self.filesystem.type_name}://{path}"

    # --- writing ------------------------------------------------------------------------------

    def _write(self, run: RunRef, split: str, step: int, groups: Sequence[TrajectoryGroup]) -> str:
        batches = encode_batches(groups, self.batch_bytes)
        first = next(batches)  # the type checks and the first batch: before any file exists
        directory = self.split_dir(run, split)
        if self.local:
            return str(write_local(Path(directory), split, step, first, batches))
        token = new_token()  # the same for every attempt: one that landed is not repeated

        def attempt(n: int) -> str:
            parts = (first, batches) if n == 1 else _split(encode_batches(groups, self.batch_bytes))
            return write_remote(self.filesystem, directory, split, step, *parts, token, n > 1)

        target = f"{directory}/{part_name(step)}"
        return self.location(self._remote(f"writing {self.location(target)}", attempt))

    def _write_spec(self, path: str, data: bytes) -> None:
        if self.local:
            make_dirs(Path(path).parent)
            atomic_write_bytes(Path(path), data)
            return

        def put(_: int) -> None:  # one PUT of the same bytes under one key: whole, and repeatable
            make_remote_dirs(self.filesystem, str(PurePosixPath(path).parent))
            with self.filesystem.open_output_stream(path) as out:
                out.write(data)

        self._remote(f"writing {self.location(path)}", put)

    def _read_spec(self, path: str) -> bytes | None:
        return self._remote(
            f"reading {self.location(path)}",
            lambda _: read_file(self.filesystem, path, local=self.local),
        )

    def _remote(self, what: str, call: Callable[[int], R]) -> R:
        """`call` tried again while an object store is busy or down, for `retry_budget` s."""
        if self.local:
            return call(1)
        return within_budget(what, call, self.retry_budget)

    # --- reading ------------------------------------------------------------------------------

    def _read(self, run: RunRef, split: str, step: int) -> list[TrajectoryGroup]:
        directory = self.split_dir(run, split)
        return self._remote(  # each attempt reads a fresh, consistent snapshot of the step
            f"reading {self.location(f'{directory}/{part_name(step)}')}",
            lambda _: read_step(self.filesystem, directory, split, step),
        )

    def _steps(self, run: RunRef, split: str) -> list[int]:
        return sorted({part.step for part in self.parts(run, split)})


def _split(batches: Iterator[Batch]) -> tuple[Batch, Iterator[Batch]]:
    return next(batches), batches


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


if TYPE_CHECKING:
    _fits: type[TrajectoryStore] = ParquetTrajectoryStore
