"""ART's v2 trajectory parquet layout: groups to arrow tables, and parquet parts back to groups.

The format only; where parts live and how they are published is the store's business
(store.py), so tools that read parts (the CLI, loaders) need not know about storage.

`group_json` and `trajectory_json` are authoritative, the other columns are an analytics view
derived from them. Groups are encoded in batches of whole groups (`encode_batches`), each
about `BATCH_BYTES` of JSON, so a writer can compress one batch while the next is serialized
and never holds a whole large part in memory.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from openai.types.chat.chat_completion import Choice
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError, SchemaSerializer, core_schema, to_json

from ...core.errors import CorruptDataError, InvalidInputError
from ...core.trajectories import History, Trajectory, TrajectoryGroup
from .exchanges import exchange_trajectory_json

FORMAT_VERSION = 2
VERSION_KEY = b"art.trajectory_parquet.version"
_LOCAL = pafs.LocalFileSystem()
BATCH_BYTES = 4 << 20
"""JSON bytes per encoded batch (one parquet row group): large enough that per-batch costs
vanish, small enough that a batch in flight is a small fraction of a large part."""

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
AUTHORITATIVE = ["format_version", "group_index", "trajectory_index", "group_json",
                 "trajectory_json"]  # fmt: skip

# zstd as ART writes it. Dictionary encoding stays on where values repeat (group columns,
# tools, roles) and is off for `trajectory_json`, where every value is unique and large:
# pyarrow would hash each one before giving up on the dictionary. Min/max statistics of JSON
# documents help no query, so they are not computed for the two JSON columns.
_LEAVES = [
    "format_version", "group_index", "trajectory_index", "group_json", "group_metadata",
    "group_metrics", "group_logs.list.element", "reward", "metrics", "metadata", "tools",
    "logs.list.element", "messages.list.element.role", "messages.list.element.content",
    "messages.list.element.tool_calls", "messages.list.element.tool_call_id",
    "messages.list.element.trainable",
]  # fmt: skip
WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": _LEAVES,
    "write_statistics": [c for c in _LEAVES if c != "group_json"],
}

# NaN and infinities (a NaN metric, a -inf logprob) must survive: the JSON is written with
# `NaN`/`Infinity` tokens, as ART does, instead of pydantic's default `null`, which would not
# validate back into a float.
_SERIALIZER_CONFIG: Any = {"ser_json_inf_nan": "constants"}
_TRAJECTORY_JSON = SchemaSerializer(Trajectory.__pydantic_core_schema__, _SERIALIZER_CONFIG)
_GROUP_JSON = SchemaSerializer(TrajectoryGroup.__pydantic_core_schema__, _SERIALIZER_CONFIG)
_HISTORY_JSON = SchemaSerializer(History.__pydantic_core_schema__, _SERIALIZER_CONFIG)
Choice.model_rebuild()  # openai defers building its models' schemas until first use
_CHOICE_JSON = SchemaSerializer(Choice.__pydantic_core_schema__, _SERIALIZER_CONFIG)
_MESSAGE_JSON = SchemaSerializer(
    core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema()),
    _SERIALIZER_CONFIG,
)

# --- encoding -----------------------------------------------------------------------------


def check_groups(groups: object) -> list[TrajectoryGroup]:
    """The batch as a list, after the type checks that cost nothing: a batch of the wrong
    shape is refused before any serialization (and before any file exists)."""
    if isinstance(groups, TrajectoryGroup) or not isinstance(groups, Sequence):
        raise InvalidInputError(
            f"groups must be a list of TrajectoryGroup, got {type(groups).__name__}"
        )
    checked = list(groups)
    for g, group in enumerate(checked):
        if not isinstance(group, TrajectoryGroup):
            raise InvalidInputError(
                f"groups[{g}] must be a TrajectoryGroup, got {type(group).__name__}"
            )
        for t, trajectory in enumerate(group.trajectories):
            if not isinstance(trajectory, Trajectory):
                raise InvalidInputError(
                    f"groups[{g}].trajectories[{t}] must be a Trajectory, "
                    f"got {type(trajectory).__name__}"
                )
    return checked


class Batch(NamedTuple):
    """Consecutive whole groups as one table (one parquet row group), and whether they are
    the last of the part."""

    table: pa.Table
    last: bool


def encode(groups: Sequence[TrajectoryGroup]) -> pa.Table:
    """The whole part as one table (tools and tests; the store streams `encode_batches`)."""
    return pa.concat_tables(batch.table for batch in encode_batches(groups))


def encode_batches(
    groups: Sequence[TrajectoryGroup], batch_bytes: int = BATCH_BYTES
) -> Iterator[Batch]:
    """Batches of consecutive whole groups, each holding about `batch_bytes` of trajectory
    JSON; always at least one (an empty part is one empty table).

    Raises InvalidInputError naming the item that cannot be serialized, when its batch is
    reached: a writer that streams the batches must drop what it wrote so far."""
    checked = check_groups(groups)
    columns = _Columns()
    for g, group in enumerate(checked):
        columns.add_group(g, group)
        if columns.json_bytes >= batch_bytes:
            yield Batch(columns.table(), last=g == len(checked) - 1)
            columns = _Columns()
    if columns.rows or not checked:
        yield Batch(columns.table(), last=True)


class _Columns:
    """One batch's columns as Python lists, filled group by group and converted once."""

    def __init__(self) -> None:
        self.rows = 0
        self.json_bytes = 0
        self.group_index: list[int] = []
        self.group_json: list[bytes] = []
        self.group_metadata: list[bytes | None] = []
        self.group_metrics: list[bytes | None] = []
        self.group_logs: list[list[str] | None] = []
        self.trajectory_index: list[int | None] = []
        self.trajectory_json: list[bytes | None] = []
        self.reward: list[float | None] = []
        self.metrics: list[bytes | None] = []
        self.metadata: list[bytes | None] = []
        self.tools: list[bytes | None] = []
        self.logs: list[list[str] | None] = []
        self.offsets = [0]
        self.null_messages: list[bool] = []
        self.role: list[str | None] = []
        self.content: list[str | None] = []
        self.tool_calls: list[bytes | None] = []
        self.tool_call_id: list[str | None] = []
        self.trainable: list[bool] = []

    def add_group(self, g: int, group: TrajectoryGroup) -> None:
        try:
            shared = (
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
            self._add_shared(g, shared)
            self.trajectory_index.append(None)
            for column in (self.trajectory_json, self.reward, self.metrics, self.metadata,
                           self.tools, self.logs):  # fmt: skip
                column.append(None)
            self.offsets.append(self.offsets[-1])
            self.null_messages.append(True)
            return
        for t, trajectory in enumerate(group.trajectories):
            try:
                dumped, tools = _trajectory_json(trajectory)
                metrics = _json_or_none(trajectory.metrics)
                metadata = _json_or_none(trajectory.metadata)
                entries = self._add_messages(trajectory)
            except PydanticSerializationError as error:
                raise InvalidInputError(
                    f"groups[{g}].trajectories[{t}] cannot be stored as JSON: {error}"
                ) from error
            self._add_shared(g, shared)
            self.trajectory_index.append(t)
            self.trajectory_json.append(dumped)
            self.json_bytes += len(dumped)
            self.reward.append(trajectory.reward)
            self.metrics.append(metrics)
            self.metadata.append(metadata)
            self.tools.append(tools)
            self.logs.append(list(trajectory.logs) or None)
            if entries is None:
                self.offsets.append(self.offsets[-1])
                self.null_messages.append(True)
            else:
                self.offsets.append(self.offsets[-1] + entries)
                self.null_messages.append(False)

    def _add_shared(self, g: int, shared: tuple[Any, ...]) -> None:
        self.rows += 1
        self.group_index.append(g)
        self.group_json.append(shared[0])
        self.group_metadata.append(shared[1])
        self.group_metrics.append(shared[2])
        self.group_logs.append(shared[3])

    def _add_messages(self, trajectory: Trajectory) -> int | None:
        """Append the analytics view of the main conversation; returns its length, or None
        (a null cell, and nothing appended) when a content is not text, e.g. multimodal
        parts. A missing content (an assistant turn with only tool calls) is a null content,
        not a reason to drop the whole view."""
        if trajectory.exchanges:  # ART leaves the view null for captured trajectories
            return None
        roles, contents, calls, call_ids, trainables = (
            self.role, self.content, self.tool_calls, self.tool_call_id, self.trainable
        )  # fmt: skip
        start = len(roles)
        for item in trajectory.messages_and_choices:
            if isinstance(item, Choice):
                message = item.message
                roles.append(message.role)
                contents.append(message.content)
                calls.append(_json(message.tool_calls) if message.tool_calls else None)
                call_ids.append(None)
                trainables.append(True)
                continue
            trainable = "finish_reason" in item
            source = item.get("message") if trainable else item
            if not isinstance(source, dict):
                source = {}
            content = source.get("content")
            if content is not None and not isinstance(content, str):
                for column in (roles, contents, calls, call_ids, trainables):
                    del column[start:]
                return None
            role = source.get("role")
            call_id = None if trainable else item.get("tool_call_id")
            tool_calls = source.get("tool_calls")
            roles.append(role if isinstance(role, str) else None)
            contents.append(content)
            calls.append(_json(tool_calls) if tool_calls else None)
            call_ids.append(call_id if isinstance(call_id, str) else None)
            trainables.append(trainable)
        return len(roles) - start

    def table(self) -> pa.Table:
        try:
            messages = pa.StructArray.from_arrays(
                [
                    pa.array(self.role, pa.string()),
                    pa.array(self.content, pa.string()),
                    pa.array(self.tool_calls, pa.string()),
                    pa.array(self.tool_call_id, pa.string()),
                    pa.array(self.trainable, pa.bool_()),
                ],
                fields=list(_MESSAGE_TYPE),
            )
            columns = [
                pa.array([FORMAT_VERSION] * self.rows, pa.int16()),
                pa.array(self.group_index, pa.int64()),
                pa.array(self.trajectory_index, pa.int64()),
                pa.array(self.group_json, pa.large_string()),
                pa.array(self.trajectory_json, pa.large_string()),
                pa.array(self.group_metadata, pa.string()),
                pa.array(self.group_metrics, pa.string()),
                pa.array(self.group_logs, pa.list_(pa.string())),
                pa.array(self.reward, pa.float64()),
                pa.array(self.metrics, pa.string()),
                pa.array(self.metadata, pa.string()),
                pa.array(self.tools, pa.string()),
                pa.array(self.logs, pa.list_(pa.string())),
                pa.ListArray.from_arrays(
                    pa.array(self.offsets, pa.int32()),
                    messages,
                    mask=pa.array(self.null_messages, pa.bool_()),
                ),
            ]
        except (UnicodeEncodeError, pa.ArrowException) as error:  # text JSON accepted but not UTF-8
            first = self.group_index[0] if self.group_index else 0
            raise InvalidInputError(
                f"groups[{first}..{self.group_index[-1] if self.group_index else 0}] hold text "
                f"that cannot be stored as UTF-8: {error}"
            ) from error
        return pa.Table.from_arrays(columns, schema=SCHEMA)


def _json(value: object) -> bytes:
    return to_json(value, inf_nan_mode="constants")


def _json_or_none(value: object) -> bytes | None:
    return _json(value) if value else None


# Sets (not frozensets) because that is what pydantic's `exclude` is typed to take; never mutated.
_NOT_IN_GROUP_JSON = {"trajectories"}
_OPTIONAL_FIELDS = ("tools", "additional_histories", "metrics", "metadata", "logs")
_SPLICED = {"messages_and_choices", "tools", "additional_histories"}
# Every combination of defaulted fields, so building an exclude set is one dict lookup. A
# trajectory that reaches these has no exchanges (captured ones take parquet_exchanges).
_EXCLUDES = {
    flags: {name for name, flag in zip(_OPTIONAL_FIELDS, flags) if flag} | {"exchanges"}
    for flags in itertools.product((False, True), repeat=len(_OPTIONAL_FIELDS))
}
_TAIL_EXCLUDES = {flags: excluded | _SPLICED for flags, excluded in _EXCLUDES.items()}
_TOOLS_ONLY = {"tools"}
_HISTORY_TAIL = {"messages_and_choices"}
_MESSAGES_KEY = b'{"messages_and_choices":'
_TOOLS_KEY = b'"tools":'


def _float_field_marks(schema: Any) -> tuple[bytes, ...] | None:
    """What a non-finite value looks like in a direct dump of the model `schema` describes.

    A nested model serializes with its own config, which writes NaN and infinities in its
    float fields as `null`; the union path writes `NaN`/`Infinity`. So a direct dump holding
    `"<float field>":null` must be redone the slow way. None when a float hides in a container
    (a `list[float]` field), where no such mark exists: then no direct dumps at all."""
    marks: set[bytes] = set()
    unmarkable = False

    def bare_float(node: Any) -> bool:
        if isinstance(node, dict):
            if node.get("type") == "float":
                return True
            if node.get("type") in ("model", "dataclass", "typed-dict", "definition-ref"):
                return False  # its fields are visited on their own
            return any(bare_float(v) for k, v in node.items() if k not in ("metadata", "cls"))
        return isinstance(node, list) and any(bare_float(v) for v in node)

    def visit(node: Any) -> None:
        nonlocal unmarkable
        if isinstance(node, list):
            for value in node:
                visit(value)
            return
        if not isinstance(node, dict):
            return
        if node.get("type") in ("model-fields", "typed-dict", "dataclass-args"):
            fields = node["fields"]
            named = fields.items() if isinstance(fields, dict) else [(f["name"], f) for f in fields]
            for name, field in named:
                inner = field["schema"]
                while inner.get("type") in ("default", "nullable"):
                    inner = inner["schema"]
                if inner.get("type") == "float":
                    marks.add(json.dumps(name).encode() + b":null")
                elif bare_float(inner) and inner.get("type") != "union":
                    unmarkable = True
        for key, value in node.items():
            if key not in ("metadata", "cls"):
                visit(value)

    visit(schema)
    return None if unmarkable else tuple(sorted(marks))


_CHOICE_FLOAT_MARKS = _float_field_marks(Choice.__pydantic_core_schema__)
_CHOICE_MARKS = _CHOICE_FLOAT_MARKS or ()

# The splice below writes the fields in declaration order; if a field is ever added or moved,
# every trajectory takes the model's own serializer instead of a wrong splice.
_CAN_SPLICE = tuple(Trajectory.model_fields) == (
    "exchanges", "messages_and_choices", "tools", "additional_histories", "reward", "metrics",
    "metadata", "logs",
) and tuple(History.model_fields) == ("messages_and_choices", "tools") and (
    _CHOICE_FLOAT_MARKS is not None
)  # fmt: skip


def _defaults(trajectory: Trajectory) -> tuple[bool, ...]:
    """Which top-level optional fields are at their default, left out of trajectory_json as
    ART does. Choices inside stay full dumps (ART's readers recognise them by
    `finish_reason`)."""
    return (
        trajectory.tools is None,
        not trajectory.additional_histories,
        not trajectory.metrics,
        not trajectory.metadata,
        not trajectory.logs,
    )


def _trajectory_json(trajectory: Trajectory) -> tuple[bytes, bytes | None]:
    """`trajectory_json`, and the `tools` column cut from the same dump.

    The bytes are exactly what `Trajectory`'s serializer writes, but each conversation item is
    serialized by its own type's serializer and the pieces are joined: pydantic serializes a
    member of the `Choice | dict` union by first converting it to Python objects and then
    serializing those, which doubles the cost of the Choices (and their per-token logprobs)
    that make up most of a trajectory. Anything unusual (an item that is neither a Choice nor
    a dict) takes the model's own serializer, which then decides, and may refuse."""
    if trajectory.exchanges:
        return exchange_trajectory_json(trajectory), None
    flags = _defaults(trajectory)
    items = _items_json(trajectory.messages_and_choices) if _CAN_SPLICE else None
    histories: list[bytes] = []
    if items is not None and not flags[1]:
        for history in trajectory.additional_histories:
            dumped = _history_json(history)
            if dumped is None:
                items = None
                break
            histories.append(dumped)
    if items is None:
        whole = _TRAJECTORY_JSON.to_json(trajectory, exclude=_EXCLUDES[flags], warnings="error")
        return whole, _json_or_none(trajectory.tools)
    pieces = [_MESSAGES_KEY, items]
    tools: bytes | None = None
    if not flags[0]:
        field = _TRAJECTORY_JSON.to_json(trajectory, include=_TOOLS_ONLY, warnings="error")
        pieces += [b",", field[1:-1]]
        if trajectory.tools:  # `[]` is in trajectory_json but a null analytics cell
            tools = field[1 + len(_TOOLS_KEY) : -1]
    if histories:
        pieces += [b',"additional_histories":[', b",".join(histories), b"]"]
    tail = _TRAJECTORY_JSON.to_json(trajectory, exclude=_TAIL_EXCLUDES[flags], warnings="error")
    pieces += [b",", tail[1:]]  # `{"reward":...}`: reward is never left out
    return b"".join(pieces), tools


def _items_json(items: list[Any]) -> bytes | None:
    dumps: list[bytes] = []
    append = dumps.append
    for item in items:
        kind = type(item)
        if kind is Choice:
            dumped = _CHOICE_JSON.to_json(item, warnings="error")
            if any(mark in dumped for mark in _CHOICE_MARKS):
                return None  # a NaN or infinite logprob: see _float_field_marks
            append(dumped)
        elif kind is dict:
            append(_MESSAGE_JSON.to_json(item, warnings="error"))
        else:
            return None
    return b"[" + b",".join(dumps) + b"]"


def _history_json(history: History) -> bytes | None:
    if type(history) is not History:
        return None
    items = _items_json(history.messages_and_choices)
    if items is None:
        return None
    tail = _HISTORY_JSON.to_json(history, exclude=_HISTORY_TAIL, warnings="error")
    return b"".join([_MESSAGES_KEY, items, b",", tail[1:]])


def full_trajectory_json(trajectory: Trajectory) -> bytes:
    """`trajectory_json` by the model's own serializer alone: the reference `_trajectory_json`
    must equal byte for byte (tests compare the two)."""
    if trajectory.exchanges:
        return exchange_trajectory_json(trajectory)
    return _TRAJECTORY_JSON.to_json(
        trajectory, exclude=_EXCLUDES[_defaults(trajectory)], warnings="error"
    )


def trajectory_json(trajectory: Trajectory) -> bytes:
    """The `trajectory_json` cell of one trajectory."""
    return _trajectory_json(trajectory)[0]


# --- decoding -----------------------------------------------------------------------------


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


def _loads(path: str, what: str, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as error:
        raise CorruptDataError(f"{path}: the JSON of {what} is malformed: {error}") from error
    if not isinstance(value, dict):
        raise CorruptDataError(f"{path}: the JSON of {what} is not an object")
    return value


def _art_trajectory(path: str, g: int, t: int, data: dict[str, Any]) -> dict[str, Any]:
    """Drop the ART-only fields arthex has no place for."""
    for name in _ART_ONLY_FIELDS:
        data.pop(name, None)
    return data
