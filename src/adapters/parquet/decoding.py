"""Rows to groups: the trajectory groups of a part, rebuilt from its authoritative columns.

Reading fails closed: anything not exactly ART's v2 layout (schema.py) raises
CorruptDataError naming the file and what was wrong, so a damaged part is reported rather
than read as fewer groups.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pydantic import ValidationError

from ...core.errors import CorruptDataError
from ...core.trajectories import TrajectoryGroup
from .schema import AUTHORITATIVE, FORMAT_VERSION, VERSION_KEY

_LOCAL = pafs.LocalFileSystem()


def read_part(
    path: str | os.PathLike[str], filesystem: pafs.FileSystem | None = None
) -> list[TrajectoryGroup]:
    """Rebuild the groups of one part from its authoritative JSON columns. `path` is a local
    path, or a path within `filesystem`. Fails closed with CorruptDataError naming the file on
    anything not exactly ART's v2 layout; a file that is not there raises FileNotFoundError."""
    with open_part(path, filesystem) as (file, where):
        return read_open_part(where, file)


@contextlib.contextmanager
def open_part(
    path: str | os.PathLike[str], filesystem: pafs.FileSystem | None = None
) -> Iterator[tuple[pq.ParquetFile, str]]:
    """The part opened as a ParquetFile, and its path for messages. Reading it later reads
    this file even if the name is replaced meanwhile (a step file rewritten by a writer).

    A file that cannot be opened (missing, no permission, no network) raises its OSError as it
    is; one that opens but is not parquet raises CorruptDataError."""
    where = os.fspath(path)
    opened = (filesystem or _LOCAL).open_input_file(where)
    try:
        try:
            file = pq.ParquetFile(opened)
        except (pa.ArrowException, OSError) as error:
            raise CorruptDataError(f"{where} cannot be read as parquet: {error}") from error
        with file:
            yield file, where
    finally:
        opened.close()


def read_open_part(where: str, file: pq.ParquetFile) -> list[TrajectoryGroup]:
    """The groups of an opened part (see `open_part`); `where` names it in errors."""
    try:
        version = (file.schema_arrow.metadata or {}).get(VERSION_KEY)
        if version is None:
            raise CorruptDataError(
                f"{where} has no {VERSION_KEY.decode()!r} schema metadata, so it is not an "
                "ART v2 trajectory file (v1 files are not read); move it out of the split"
            )
        if version != str(FORMAT_VERSION).encode():
            raise CorruptDataError(
                f"{where} is trajectory parquet version "
                f"{version.decode(errors='replace')!r}; this arthex reads version "
                f"{FORMAT_VERSION} only (upgrade arthex?)"
            )
        missing = [c for c in AUTHORITATIVE if c not in file.schema_arrow.names]
        if missing:
            raise CorruptDataError(f"{where} lacks the column(s) {', '.join(missing)}")
        table = file.read(columns=AUTHORITATIVE)
    except (pa.ArrowException, OSError) as error:
        raise CorruptDataError(f"{where} cannot be read as parquet: {error}") from error
    return decode(where, table)


def decode(where: str, table: pa.Table) -> list[TrajectoryGroup]:
    """The groups of a table with the authoritative columns; `where` names it in errors."""
    columns = [table.column(name).to_pylist() for name in AUTHORITATIVE]
    return _decode(where, *columns)


def _decode(
    path: str,
    versions: list[Any],
    group_indexes: list[Any],
    trajectory_indexes: list[Any],
    group_jsons: list[Any],
    trajectory_jsons: list[Any],
) -> list[TrajectoryGroup]:
    rows: dict[int, list[tuple[int | None, str | None]]] = {}
    group_json: dict[int, str] = {}
    for row, (version, g, t, gj, tj) in enumerate(
        zip(versions, group_indexes, trajectory_indexes, group_jsons, trajectory_jsons)
    ):
        if version != FORMAT_VERSION:
            raise CorruptDataError(f"{path}: row {row} has format_version {version!r}")
        if not _is_index(g) or gj is None:
            raise CorruptDataError(f"{path}: row {row} has no group_index or group_json")
        if t is not None and not _is_index(t):
            raise CorruptDataError(f"{path}: row {row} has trajectory_index {t!r}")
        if (t is None) != (tj is None):
            raise CorruptDataError(
                f"{path}: row {row} must have both trajectory_index and trajectory_json or "
                "neither (a sentinel row)"
            )
        if group_json.setdefault(g, gj) != gj:
            raise CorruptDataError(f"{path}: group {g} has differing group_json across rows")
        rows.setdefault(g, []).append((t, tj))
    if sorted(rows) != list(range(len(rows))):
        raise CorruptDataError(f"{path}: group indexes {sorted(rows)} are not contiguous from 0")
    return [_decode_group(path, g, group_json[g], rows[g]) for g in range(len(rows))]


def _is_index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# Fields ART's Trajectory has and arthex's does not; dropped on read.
_ART_ONLY_FIELDS = ("initial_policy_version", "final_policy_version")


def _decode_group(
    path: str, g: int, dumped: str, rows: list[tuple[int | None, str | None]]
) -> TrajectoryGroup:
    sentinel = [t for t, _ in rows if t is None]
    if sentinel and len(rows) != 1:
        raise CorruptDataError(
            f"{path}: group {g} mixes a sentinel row with other rows ({len(rows)} rows)"
        )
    data = json_object(f"{path}: the group_json of group {g}", dumped)
    if "trajectories" in data:
        raise CorruptDataError(f"{path}: group_json of group {g} must not hold trajectories")
    trajectories: list[dict[str, Any]] = []
    if not sentinel:
        ordered = sorted((t, tj) for t, tj in rows if t is not None and tj is not None)
        if [t for t, _ in ordered] != list(range(len(rows))):
            raise CorruptDataError(
                f"{path}: group {g} has trajectory indexes {[t for t, _ in ordered]}, "
                f"expected 0..{len(rows) - 1}"
            )
        trajectories = [
            _art_trajectory(json_object(f"{path}: trajectory {t} of group {g}", tj))
            for t, tj in ordered
        ]
    try:
        return TrajectoryGroup.model_validate({**data, "trajectories": trajectories})
    except ValidationError as error:
        raise CorruptDataError(
            f"{path}: group {g} is not a valid trajectory group: {error}"
        ) from error


def json_object(where: str, text: str | bytes, kind: str = "an object") -> dict[str, Any]:
    """`text` parsed as a JSON object (`kind` names what it should be); CorruptDataError naming
    `where` when it is malformed or not an object."""
    try:
        value = json.loads(text)
    except ValueError as error:
        raise CorruptDataError(f"{where} is malformed JSON ({error})") from error
    if not isinstance(value, dict):
        raise CorruptDataError(f"{where} holds {type(value).__name__}, not {kind}")
    return value


def _art_trajectory(data: dict[str, Any]) -> dict[str, Any]:
    """Drop the ART-only fields arthex has no place for."""
    for name in _ART_ONLY_FIELDS:
        data.pop(name, None)
    return data
