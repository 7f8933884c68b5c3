"""One trajectory file on its own, outside a run's store: the groups written to a path of the
caller's choosing, and read back from a file of either layout ART has written.

Writing is the store's encoder (encoding.py) into one file, atomically. Reading takes ART's v2
layout through the store's decoder (decoding.py), and also ART's first layout (v1: the
analytics columns only, no version), which the store never reads: its conversations come
back as plain messages, since v1 kept no choices.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from ...core.errors import CorruptDataError
from ...core.trajectories import Trajectory, TrajectoryGroup
from ..files import atomic_temp
from .decoding import decode, open_part, read_open_part
from .encoding import check_groups, encode_batches
from .schema import AUTHORITATIVE, VERSION_KEY
from .step_file import write_part

__all__ = [
    "read_groups_file",
    "read_trajectory_groups_parquet",
    "write_groups_file",
    "write_trajectory_groups_parquet",
]


def write_groups_file(path: str | os.PathLike[str], groups: Sequence[TrajectoryGroup]) -> None:
    """Write `groups` to `path` in ART's v2 layout, replacing any file there. A batch that
    cannot be stored is refused before the file is touched."""
    checked = check_groups(groups)
    batches = encode_batches(checked)
    with atomic_temp(Path(path)) as temp:
        write_part(str(temp), next(batches), batches, secrets.token_hex(8))


def read_groups_file(path: str | os.PathLike[str]) -> list[TrajectoryGroup]:
    """The groups of one trajectory file, v2 or v1. CorruptDataError naming the file on
    anything that is neither; a missing file raises FileNotFoundError."""
    with open_part(path) as (file, where):
        schema = file.schema_arrow
        version = (schema.metadata or {}).get(VERSION_KEY)
        versioned = "format_version" in schema.names
        if version is not None or versioned:
            if version is None:
                # ART reads a v2 file whose footer lost its version when it has rows.
                if not file.metadata.num_rows:
                    raise CorruptDataError(f"{where} is an empty v2 file without its version")
                return decode(where, file.read(columns=AUTHORITATIVE))
            return read_open_part(where, file)
        if {"group_json", "trajectory_json"} & set(schema.names):
            raise CorruptDataError(f"{where} has v2 columns but no format_version column")
        return _read_v1(where, file.read())


def write_trajectory_groups_parquet(
    trajectory_groups: list[TrajectoryGroup], path: str | os.PathLike[str]
) -> None:
    """ART's name for `write_groups_file`: the groups, whole, in one zstd parquet file in ART's
    v2 layout (replacing a file at `path` atomically). A batch that cannot be stored raises
    InvalidInputError, a ValueError, before anything is written."""
    write_groups_file(path, trajectory_groups)


def read_trajectory_groups_parquet(path: str | os.PathLike[str]) -> list[TrajectoryGroup]:
    """ART's name for `read_groups_file`: the groups of a v2 file exactly as written, or of an
    ART v1 file. A file that is neither raises a ValueError naming it, as ART's does (and a
    CorruptDataError, as arthex's readers do)."""
    try:
        return read_groups_file(path)
    except CorruptDataError as error:
        raise TrajectoryFileError(str(error)) from error


class TrajectoryFileError(CorruptDataError, ValueError):
    """A trajectory file that is not one: arthex's CorruptDataError, and the ValueError ART's
    callers catch."""


def _read_v1(where: str, table: pa.Table) -> list[TrajectoryGroup]:
    trajectories: dict[int, list[Trajectory]] = {}
    shared: dict[int, tuple[dict[str, Any], dict[str, Any], list[str]]] = {}
    for row, cells in enumerate(table.to_pylist()):
        reward = cells.get("reward")
        if reward is None and cells.get("messages") is None:
            continue  # a failed group's placeholder: v1 did not keep the group
        g = cells.get("group_index", 0)
        if not isinstance(g, int) or isinstance(g, bool):
            raise CorruptDataError(f"{where}: row {row} has group_index {g!r}")
        if not isinstance(reward, (int, float)) or isinstance(reward, bool):
            raise CorruptDataError(f"{where}: row {row} has reward {reward!r}, not a number")
        shared.setdefault(
            g,
            (
                _lenient_object(cells.get("group_metadata")),
                _lenient_object(cells.get("group_metrics")),
                _logs(cells.get("group_logs"), where, row, strict=False),
            ),
        )
        messages = cells.get("messages") or []
        trajectories.setdefault(g, []).append(
            Trajectory(
                messages_and_choices=[_message(m, where, row) for m in messages],
                reward=float(reward),
                metrics=_lenient_object(cells.get("metrics")),
                metadata=_lenient_object(cells.get("metadata")),
                logs=_logs(cells.get("logs"), where, row, strict=True),
            )
        )
    return [
        TrajectoryGroup(
            trajectories=trajectories[g],
            metadata=shared[g][0],
            metrics=shared[g][1],
            logs=shared[g][2],
        )
        for g in sorted(trajectories)
    ]


def _message(cell: object, where: str, row: int) -> dict[str, Any]:
    if not isinstance(cell, Mapping):
        raise CorruptDataError(f"{where}: row {row} has a message that is not a struct")
    message: dict[str, Any] = {"role": cell.get("role"), "content": cell.get("content")}
    if tool_calls := cell.get("tool_calls"):
        message["tool_calls"] = json.loads(str(tool_calls))
    if tool_call_id := cell.get("tool_call_id"):
        message["tool_call_id"] = tool_call_id
    return message


def _lenient_object(cell: object) -> dict[str, Any]:
    """v1's JSON object cells, read as ART reads them: anything else is an empty object."""
    if isinstance(cell, Mapping):
        return dict(cell)
    if isinstance(cell, (str, bytes)) and cell:
        try:
            value = json.loads(cell)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}
    return {}


def _logs(cell: object, where: str, row: int, *, strict: bool) -> list[str]:
    if cell is None:
        return []
    if isinstance(cell, (list, tuple)):
        return [str(item) for item in cell]
    if strict:
        raise CorruptDataError(f"{where}: row {row} has logs that are not a list")
    return [str(cell)]
