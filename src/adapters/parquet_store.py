"""ParquetTrajectoryStore: logged trajectory groups as ART v2 parquet files, one file per write.

Layout: `{root}/{project}/models/{name}/trajectories/{split}/{step:04d}.parquet`, and for each
further write at the same (split, step) `{step:04d}-1.parquet`, `{step:04d}-2.parquet`, ...
ART overwrote the file instead, losing the earlier batch; here a part is published under a
name nobody holds yet (a hard link), so two processes racing for one step both keep their data.

The file is ART's v2 layout, so ART's tools and ours read each other's runs: `group_json` and
`trajectory_json` are authoritative, the other columns are an analytics view derived from them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from openai.types.chat.chat_completion import Choice
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError, SchemaSerializer, to_json

from ..core.errors import CorruptDataError, InvalidInputError
from ..core.identity import ModelSpec, RunRef, validate_name
from ..core.trajectories import Trajectory, TrajectoryGroup
from ._files import TEMP_PREFIX, atomic_write_bytes, fsync_dir, publish_new, temp_path_for

if TYPE_CHECKING:
    from ..ports.trajectory_store import TrajectoryStore

FORMAT_VERSION = 2
VERSION_KEY = b"art.trajectory_parquet.version"

# NaN and infinities (a NaN metric, a -inf logprob) must survive: the JSON is written with
# `NaN`/`Infinity` tokens, as ART does, instead of pydantic's default `null`, which would not
# validate back into a float.
_SERIALIZER_CONFIG: Any = {"ser_json_inf_nan": "constants"}
_TRAJECTORY_JSON = SchemaSerializer(Trajectory.__pydantic_core_schema__, _SERIALIZER_CONFIG)
_GROUP_JSON = SchemaSerializer(TrajectoryGroup.__pydantic_core_schema__, _SERIALIZER_CONFIG)

_MESSAGE_TYPE = pa.struct(
    [
        pa.field("role", pa.string()),
        pa.field("content", pa.string()),
        pa.field("tool_calls", pa.string()),
        pa.field("tool_call_id", pa.string()),
        pa.field("trainable", pa.bool_()),
    ]
)
SCHEMA = pa.schema(
    [
        pa.field("format_version", pa.int16()),
        pa.field("group_index", pa.int64()),
        pa.field("trajectory_index", pa.int64()),
        pa.field("group_json", pa.large_string()),
        pa.field("trajectory_json", pa.large_string()),
        pa.field("group_metadata", pa.string()),
        pa.field("group_metrics", pa.string()),
        pa.field("group_logs", pa.list_(pa.string())),
        pa.field("reward", pa.float64()),
        pa.field("metrics", pa.string()),
        pa.field("metadata", pa.string()),
        pa.field("tools", pa.string()),
        pa.field("logs", pa.list_(pa.string())),
        pa.field("messages", pa.list_(_MESSAGE_TYPE)),
    ],
    metadata={VERSION_KEY: str(FORMAT_VERSION).encode()},
)
_AUTHORITATIVE = ["format_version", "group_index", "trajectory_index", "group_json",
                  "trajectory_json"]  # fmt: skip

_PART_NAME = re.compile(r"([0-9]+)(?:-([1-9][0-9]*))?\.parquet")
# Fields ART's Trajectory has and arthex's does not; dropped on read (exchanges only when empty).
_ART_ONLY_FIELDS = ("initial_policy_version", "final_policy_version")


class ParquetTrajectoryStore:
    """Trajectory groups under `{root}/{project}/models/{name}/`, in ART's v2 parquet layout."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

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
        path = self._model_dir(spec.run) / "model.json"
        await asyncio.to_thread(_write_spec, path, data.encode())

    def split_dir(self, run: RunRef, split: str) -> Path:
        """Where the parts of `split` live (the directory may not exist yet)."""
        return self._model_dir(run) / "trajectories" / validate_name(split, "split")

    def part_paths(self, run: RunRef, split: str, step: int) -> list[Path]:
        """The parts of (split, step), in the order they were written."""
        _check_location(split, step)
        directory = self.split_dir(run, split)
        parts = sorted(
            (part, directory / name)
            for part_step, part, name in _list_parts(directory)
            if part_step == step
        )
        return [path for _, path in parts]

    def _model_dir(self, run: RunRef) -> Path:
        return self.root / run.project / "models" / run.name

    def _write(self, run: RunRef, split: str, step: int, groups: Sequence[TrajectoryGroup]) -> str:
        table = _encode(groups)  # every input error surfaces here, before any file exists
        directory = self.split_dir(run, split)
        _make_dirs(directory)
        temp = temp_path_for(directory / _part_name(step, 0))
        try:
            pq.write_table(table, temp, compression="zstd")
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        taken = [part for part_step, part, _ in _list_parts(directory) if part_step == step]
        # Start after the newest part so parts keep write order even if an earlier one is gone;
        # a name taken meanwhile by a concurrent writer is skipped by publish_new.
        start = max(taken) + 1 if taken else 0
        candidates = (directory / _part_name(step, part) for part in itertools.count(start))
        return str(publish_new(temp, candidates))

    def _read(self, run: RunRef, split: str, step: int) -> list[TrajectoryGroup]:
        groups: list[TrajectoryGroup] = []
        for path in self.part_paths(run, split, step):
            groups.extend(read_part(path))
        return groups

    def _steps(self, run: RunRef, split: str) -> list[int]:
        return sorted({step for step, _, _ in _list_parts(self.split_dir(run, split))})


def _check_location(split: str, step: int) -> None:
    validate_name(split, "split")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidInputError(f"step must be an integer >= 0, got {step!r}")


def _part_name(step: int, part: int) -> str:
    return f"{step:04d}.parquet" if part == 0 else f"{step:04d}-{part}.parquet"


def _list_parts(directory: Path) -> Iterator[tuple[int, int, str]]:
    """(step, part, file name) of every part file; temp files and foreign names are skipped."""
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.name.startswith(TEMP_PREFIX):
            continue
        match = _PART_NAME.fullmatch(entry.name)
        if match is None or not entry.is_file():
            continue
        step = int(match.group(1))
        if _part_name(step, 0).removesuffix(".parquet") != match.group(1):
            continue  # `12.parquet` or `00012.parquet` is not a name this store writes
        yield step, int(match.group(2) or 0), entry.name


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


def _write_spec(path: Path, data: bytes) -> None:
    _make_dirs(path.parent)
    atomic_write_bytes(path, data)


# --- encoding -----------------------------------------------------------------------------


def _json(value: object) -> bytes:
    return to_json(value, inf_nan_mode="constants")


def _json_or_none(value: object) -> bytes | None:
    return _json(value) if value else None


def _encode(groups: Sequence[TrajectoryGroup]) -> pa.Table:
    """The whole part as one table; raises InvalidInputError naming the item that cannot be
    serialized, so a bad batch never reaches the disk.

    Rows are collected as tuples and transposed once at the end: with small trajectories the
    per-row Python work, not the JSON, is what dominates."""
    given: object = groups  # checked at runtime: callers may pass anything
    if isinstance(given, TrajectoryGroup) or not isinstance(given, Sequence):
        raise InvalidInputError(
            f"groups must be a list of TrajectoryGroup, got {type(given).__name__}"
        )
    rows: list[tuple[Any, ...]] = []
    messages: list[_Entry] = []
    offsets = [0]
    null_messages: list[bool] = []
    for g, group in enumerate(given):
        if not isinstance(group, TrajectoryGroup):
            raise InvalidInputError(
                f"groups[{g}] must be a TrajectoryGroup, got {type(group).__name__}"
            )
        try:
            shared = (
                g,
                _GROUP_JSON.to_json(
                    group, exclude=_NOT_IN_GROUP_JSON, exclude_defaults=True, warnings="error"
                ),
                _json_or_none(group.metadata),
                _json_or_none(group.metrics),
                list(group.logs) or None,
            )
        except PydanticSerializationError as error:
            raise InvalidInputError(f"groups[{g}] cannot be stored as JSON: {error}") from error
        if not group.trajectories:  # every rollout failed: one sentinel row keeps the group
            rows.append((*shared, None, None, None, None, None, None, None))
            offsets.append(offsets[-1])
            null_messages.append(True)
            continue
        trajectory: object
        for t, trajectory in enumerate(group.trajectories):
            if not isinstance(trajectory, Trajectory):
                raise InvalidInputError(
                    f"groups[{g}].trajectories[{t}] must be a Trajectory, "
                    f"got {type(trajectory).__name__}"
                )
            try:
                rows.append(
                    (
                        *shared,
                        t,
                        _TRAJECTORY_JSON.to_json(
                            trajectory, exclude=_default_fields(trajectory), warnings="error"
                        ),
                        trajectory.reward,
                        _json_or_none(trajectory.metrics),
                        _json_or_none(trajectory.metadata),
                        _json_or_none(trajectory.tools),
                        list(trajectory.logs) or None,
                    )
                )
                entries = _message_entries(trajectory)
            except PydanticSerializationError as error:
                raise InvalidInputError(
                    f"groups[{g}].trajectories[{t}] cannot be stored as JSON: {error}"
                ) from error
            if entries is None:
                offsets.append(offsets[-1])
                null_messages.append(True)
            else:
                messages.extend(entries)
                offsets.append(offsets[-1] + len(entries))
                null_messages.append(False)

    n = len(rows)
    (group_index, group_json, group_metadata, group_metrics, group_logs, trajectory_index,
     trajectory_json, reward, metrics, metadata, tools, logs) = (
        list(zip(*rows)) if rows else [()] * 12
    )  # fmt: skip
    role, content, tool_calls, tool_call_id, trainable = (
        list(zip(*messages)) if messages else [()] * 5
    )
    message_values = pa.StructArray.from_arrays(
        [
            pa.array(role, pa.string()),
            pa.array(content, pa.string()),
            pa.array(tool_calls, pa.string()),
            pa.array(tool_call_id, pa.string()),
            pa.array(trainable, pa.bool_()),
        ],
        fields=list(_MESSAGE_TYPE),
    )
    columns = [
        pa.array([FORMAT_VERSION] * n, pa.int16()),
        pa.array(group_index, pa.int64()),
        pa.array(trajectory_index, pa.int64()),
        pa.array(group_json, pa.large_string()),
        pa.array(trajectory_json, pa.large_string()),
        pa.array(group_metadata, pa.string()),
        pa.array(group_metrics, pa.string()),
        pa.array(group_logs, pa.list_(pa.string())),
        pa.array(reward, pa.float64()),
        pa.array(metrics, pa.string()),
        pa.array(metadata, pa.string()),
        pa.array(tools, pa.string()),
        pa.array(logs, pa.list_(pa.string())),
        pa.ListArray.from_arrays(
            pa.array(offsets, pa.int32()), message_values, mask=pa.array(null_messages, pa.bool_())
        ),
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMA)


# Sets (not frozensets) because that is what pydantic's `exclude` is typed to take; never mutated.
_NOT_IN_GROUP_JSON = {"trajectories"}
_OPTIONAL_FIELDS = ("tools", "additional_histories", "metrics", "metadata", "logs")
# Every combination of defaulted fields, so building the exclude set is one dict lookup.
_EXCLUDES = {
    flags: {name for name, flag in zip(_OPTIONAL_FIELDS, flags) if flag}
    for flags in itertools.product((False, True), repeat=len(_OPTIONAL_FIELDS))
}


def _default_fields(trajectory: Trajectory) -> set[str]:
    """Top-level fields still at their default, left out of trajectory_json as ART does.
    Choices inside stay full dumps (ART's readers recognise them by `finish_reason`)."""
    return _EXCLUDES[
        (
            trajectory.tools is None,
            not trajectory.additional_histories,
            not trajectory.metrics,
            not trajectory.metadata,
            not trajectory.logs,
        )
    ]


_Entry = tuple[str | None, str | None, bytes | None, str | None, bool]


def _message_entries(trajectory: Trajectory) -> list[_Entry] | None:
    """The analytics view of the main conversation; None (a null cell) when a content is not
    text, e.g. multimodal parts. A missing content (an assistant turn with only tool calls) is
    a null content, not a reason to drop the whole view."""
    entries: list[_Entry] = []
    append = entries.append
    for item in trajectory.messages_and_choices:
        if isinstance(item, Choice):
            message = item.message
            calls = _json(message.tool_calls) if message.tool_calls else None
            append((message.role, message.content, calls, None, True))
            continue
        trainable = "finish_reason" in item
        source = item.get("message") if trainable else item
        if not isinstance(source, dict):
            source = {}
        content = source.get("content")
        if content is not None and not isinstance(content, str):
            return None
        role = source.get("role")
        call_id = None if trainable else item.get("tool_call_id")
        calls = source.get("tool_calls")
        append(
            (
                role if isinstance(role, str) else None,
                content,
                _json(calls) if calls else None,
                call_id if isinstance(call_id, str) else None,
                trainable,
            )
        )
    return entries


# --- decoding -----------------------------------------------------------------------------


def read_part(path: Path) -> list[TrajectoryGroup]:
    """Rebuild the groups of one part from its authoritative JSON columns. Fails closed with
    CorruptDataError naming the file on anything not exactly ART's v2 layout."""
    try:
        with pq.ParquetFile(path) as file:
            version = (file.schema_arrow.metadata or {}).get(VERSION_KEY)
            if version is None:
                raise CorruptDataError(
                    f"{path} has no {VERSION_KEY.decode()!r} schema metadata, so it is not an "
                    "ART v2 trajectory file (v1 files are not read); move it out of the split"
                )
            if version != str(FORMAT_VERSION).encode():
                raise CorruptDataError(
                    f"{path} is trajectory parquet version {version.decode(errors='replace')!r}; "
                    f"this arthex reads version {FORMAT_VERSION} only (upgrade arthex?)"
                )
            missing = [c for c in _AUTHORITATIVE if c not in file.schema_arrow.names]
            if missing:
                raise CorruptDataError(f"{path} lacks the column(s) {', '.join(missing)}")
            table = file.read(columns=_AUTHORITATIVE)
    except (pa.ArrowException, OSError) as error:
        raise CorruptDataError(f"{path} cannot be read as parquet: {error}") from error
    columns = [table.column(name).to_pylist() for name in _AUTHORITATIVE]
    return _decode(path, *columns)


def _decode(
    path: Path,
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


def _decode_group(
    path: Path, g: int, dumped: str, rows: list[tuple[int | None, str | None]]
) -> TrajectoryGroup:
    sentinel = [t for t, _ in rows if t is None]
    if sentinel and len(rows) != 1:
        raise CorruptDataError(
            f"{path}: group {g} mixes a sentinel row with other rows ({len(rows)} rows)"
        )
    data = _loads(path, f"group {g}", dumped)
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
            _art_trajectory(path, g, t, _loads(path, f"group {g} trajectory {t}", tj))
            for t, tj in ordered
        ]
    try:
        return TrajectoryGroup.model_validate({**data, "trajectories": trajectories})
    except ValidationError as error:
        raise CorruptDataError(
            f"{path}: group {g} is not a valid trajectory group: {error}"
        ) from error


def _loads(path: Path, what: str, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as error:
        raise CorruptDataError(f"{path}: the JSON of {what} is malformed: {error}") from error
    if not isinstance(value, dict):
        raise CorruptDataError(f"{path}: the JSON of {what} is not an object")
    return value


def _art_trajectory(path: Path, g: int, t: int, data: dict[str, Any]) -> dict[str, Any]:
    """Drop the ART-only fields arthex has no place for; refuse what it cannot represent."""
    for name in _ART_ONLY_FIELDS:
        data.pop(name, None)
    if data.pop("exchanges", None):
        raise CorruptDataError(
            f"{path}: group {g} trajectory {t} was captured as ART `exchanges`, which arthex "
            "does not read; log it with messages_and_choices"
        )
    return data


if TYPE_CHECKING:
    _fits: type[TrajectoryStore] = ParquetTrajectoryStore
