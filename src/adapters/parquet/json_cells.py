"""The JSON cells of a part: `group_json`, `trajectory_json` (with the `tools` cell cut from
the same dump) and the analytics columns' JSON.

`trajectory_json` is where writing spends its time, so it is spliced from per-item dumps
rather than left to the model's serializer (see `trajectory_cells`); `full_trajectory_json`
is the model's own serializer, the reference the splice must equal byte for byte.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from openai.types.chat.chat_completion import Choice
from pydantic_core import SchemaSerializer, core_schema, to_json

from ...core.trajectories import History, Trajectory, TrajectoryGroup
from .exchanges import exchange_trajectory_json

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


def json_bytes(value: object) -> bytes:
    """`value` as JSON, non-finite numbers as `NaN`/`Infinity` tokens."""
    return to_json(value, inf_nan_mode="constants")


def json_cell(value: object) -> bytes | None:
    """An analytics cell: `value` as JSON, or null when it is empty."""
    return json_bytes(value) if value else None


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


def group_json(group: TrajectoryGroup) -> bytes:
    """The `group_json` cell: the group without its trajectories and defaulted fields."""
    return _GROUP_JSON.to_json(
        group, exclude=_NOT_IN_GROUP_JSON, exclude_defaults=True, warnings="error"
    )


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


def trajectory_cells(trajectory: Trajectory) -> tuple[bytes, bytes | None]:
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
        return whole, json_cell(trajectory.tools)
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
    """`trajectory_json` by the model's own serializer alone: the reference `trajectory_cells`
    must equal byte for byte (tests compare the two)."""
    if trajectory.exchanges:
        return exchange_trajectory_json(trajectory)
    return _TRAJECTORY_JSON.to_json(
        trajectory, exclude=_EXCLUDES[_defaults(trajectory)], warnings="error"
    )


def trajectory_json(trajectory: Trajectory) -> bytes:
    """The `trajectory_json` cell of one trajectory."""
    return trajectory_cells(trajectory)[0]
