"""ART's compact envelope (`art.trajectories.compact_dump`, `compact_validate`,
`compact_validate_json`) and `compact_memory`, on arthex's trajectories and ART's tokenized and
tensorized ones (tokenized_trajectories, tensorized_trajectories).

The envelope is ART's JSON: `{"format": "art.trajectories", "version": 1, "kind": ...,
"strings": {"$0": "...", ...}, "data": ...}`. `data` is the value's JSON with each string that
is worth it (used often enough that a reference plus its table entry is shorter than its
repeats) replaced by a reference; the envelope is written without a table when that is no
shorter. A reference name that occurs as a literal string in the data is never used, so every
literal reads back as itself. Inside tokenized values, a history source's recorded call is
written as its index among the source trajectory's calls (a lone tokenized history carries its
own list), and a tokenized group's trajectories are written once, in the group. ART reads what
this writes, and the reverse (tests/interop/test_art_compact_trajectories.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar, get_args, get_origin

from pydantic import BaseModel

from ..core.errors import InvalidInputError
from ..core.trajectories import Trajectory, TrajectoryGroup
from .tokenized_trajectories import (
    TokenizedHistory,
    TokenizedMultiHistoryTrajectory,
    TokenizedTrajectory,
    TokenizedTrajectoryGroup,
)

__all__ = ["compact_dump", "compact_memory", "compact_validate", "compact_validate_json"]

FORMAT, VERSION = "art.trajectories", 1
_ENVELOPE = {"format", "version", "kind", "strings", "data"}
_SOURCE_MARKERS = {"request_index", "choice_index", "output_index", "output_indices",
                   "generation_index", "prompt_index"}  # fmt: skip
_PROTOCOLS = ("chat_completions", "completions", "responses", "messages")
_TENSORS = "arthex.utils.tensorized_trajectories"
# singular kind -> (plural kind, the name of its class)
_KINDS: dict[str, tuple[str, str]] = {
    "trajectory": ("trajectories", "Trajectory"),
    "trajectory_group": ("trajectory_groups", "TrajectoryGroup"),
    "tokenized_history": ("tokenized_histories", "TokenizedHistory"),
    "tokenized_trajectory": ("tokenized_trajectories", "TokenizedTrajectory"),
    "tokenized_multi_history_trajectory": (
        "tokenized_multi_history_trajectories",
        "TokenizedMultiHistoryTrajectory",
    ),
    "tokenized_trajectory_group": ("tokenized_trajectory_groups", "TokenizedTrajectoryGroup"),
    "tensorized_history": ("tensorized_histories", "TensorizedHistory"),
    "tensorized_trajectory": ("tensorized_trajectories", "TensorizedTrajectory"),
    "tensorized_multi_history_trajectory": (
        "tensorized_multi_history_trajectories",
        "TensorizedMultiHistoryTrajectory",
    ),
    "tensorized_trajectory_group": ("tensorized_trajectory_groups", "TensorizedTrajectoryGroup"),
}
_SINGULAR = {plural: singular for singular, (plural, _) in _KINDS.items()}


# -- which kind a value or a class is ------------------------------------------------------------


def _classes() -> dict[str, type[BaseModel]]:
    """Kind -> class; the tensorized ones only once their module (and torch) is loaded: a
    value cannot be tensorized before."""
    found: dict[str, type[BaseModel]] = {
        "trajectory": Trajectory,
        "trajectory_group": TrajectoryGroup,
        "tokenized_trajectory": TokenizedTrajectory,
        "tokenized_history": TokenizedHistory,
        "tokenized_multi_history_trajectory": TokenizedMultiHistoryTrajectory,
        "tokenized_trajectory_group": TokenizedTrajectoryGroup,
    }
    tensors = sys.modules.get(_TENSORS)
    if tensors is not None:
        for kind in (
            "tensorized_trajectory",
            "tensorized_history",
            "tensorized_multi_history_trajectory",
            "tensorized_trajectory_group",
        ):
            found[kind] = getattr(tensors, _KINDS[kind][1])  # fmt: skip
    return found


def _kind_of_class(cls: type) -> str | None:
    for kind, known in _classes().items():  # a trajectory before the history it extends
        if issubclass(cls, known):
            return kind
    return None


# -- dumping -------------------------------------------------------------------------------------


def compact_dump(value: Any) -> dict[str, Any]:
    """One value, or a non-empty iterable of values of one kind, in the compact envelope."""
    kind = _kind_of_class(type(value))
    if kind is not None:
        return _encode(kind, _dump_value(value, kind))
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise TypeError(f"compact_dump() received an unsupported value: {type(value).__name__}")
    values = list(value)
    if not values:
        raise ValueError("compact_dump() cannot infer the kind of an empty iterable")
    kinds = {_kind_of_class(type(item)) for item in values}
    if None in kinds:
        raise TypeError("compact_dump() received an unsupported value")
    if len(kinds) != 1:
        raise TypeError("compact_dump() requires a homogeneous iterable")
    [kind] = kinds
    assert kind is not None
    return _encode(_KINDS[kind][0], [_dump_value(item, kind) for item in values])


def _dump_value(value: BaseModel, kind: str) -> Any:
    data = value.model_dump(mode="json")
    if kind in ("trajectory", "trajectory_group"):
        return data
    if kind.endswith("_history"):
        calls = _Calls([], fixed=False)
        _swap_sources(data["history"], calls, encode=True)
        return {"value": data, "exchanges": calls.calls}
    if kind.endswith("_group"):
        sources = data["trajectory_group"]["trajectories"]
        for child, source in zip(data["trajectories"], sources, strict=True):
            child.pop("trajectory")  # written once, in the group
            _swap_histories(child, _Calls.of(source), encode=True)
        return data
    _swap_histories(data, _Calls.of(data["trajectory"]), encode=True)
    return data


class _Calls:
    """The recorded calls a history's sources point at, by index."""

    def __init__(self, calls: list[dict[str, Any]], *, fixed: bool) -> None:
        self.calls = calls
        self.fixed = fixed
        self._index = {_key(call): i for i, call in enumerate(calls)}

    @classmethod
    def of(cls, trajectory: Any) -> _Calls:
        exchanges = _mapping(trajectory, "a source trajectory").get("exchanges") or {}
        calls = [call for name in _PROTOCOLS for call in _mapping(exchanges, "exchanges").get(
            name, [])]  # fmt: skip
        return cls([dict(_mapping(c, "an exchange")) for c in calls], fixed=True)

    def reference(self, call: Any) -> int:
        key = _key(call)
        if key not in self._index:
            if self.fixed:
                raise ValueError("a history source's exchange is not in its trajectory")
            self._index[key] = len(self.calls)
            self.calls.append(call)
        return self._index[key]

    def resolve(self, index: Any) -> dict[str, Any]:
        if not isinstance(index, int) or isinstance(index, bool):
            raise ValueError("a history source's exchange reference must be an index")
        if not 0 <= index < len(self.calls):
            raise ValueError(f"history source exchange reference {index} is out of range")
        return self.calls[index]


def _swap_histories(data: dict[str, Any], calls: _Calls, *, encode: bool) -> None:
    if "histories" in data:
        for history in data["histories"]:
            _swap_sources(_mapping(history, "a tokenized history").get("history"), calls,
                          encode=encode)  # fmt: skip
    else:
        _swap_sources(data.get("history"), calls, encode=encode)


def _swap_sources(value: Any, calls: _Calls, *, encode: bool) -> None:
    """Each source's `exchange` (and an Anthropic `system_source`, a Responses
    `instructions_source`) becomes its index in `calls` (`encode`) or back."""
    swap = calls.reference if encode else calls.resolve
    if isinstance(value, list):
        for item in value:
            _swap_sources(item, calls, encode=encode)
    elif isinstance(value, dict):
        if "exchange" in value and _SOURCE_MARKERS & value.keys():
            value["exchange"] = swap(value["exchange"])
            return
        for key, item in value.items():
            if key in ("system_source", "instructions_source") and item is not None:
                value[key] = swap(item)
            else:
                _swap_sources(item, calls, encode=encode)


def _key(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _encode(kind: str, data: Any) -> dict[str, Any]:
    counts: dict[str, int] = {}
    _count(data, counts)
    strings: dict[str, str] = {}
    replace: dict[str, str] = {}
    index = 0
    for text, count in counts.items():  # in order of first appearance
        while f"${index}" in counts:  # never shadow a literal
            index += 1
        reference = f"${index}"
        length, ref_length = _size(text), _size(reference)
        entry = ref_length + 1 + length + (1 if strings else 0)
        if count * ref_length + entry < count * length:
            strings[reference] = text
            replace[text] = reference
            index += 1
    plain = {"format": FORMAT, "version": VERSION, "kind": kind, "strings": {}, "data": data}
    if not strings:
        return plain
    compact = {**plain, "strings": strings, "data": _replaced(data, replace)}
    return compact if _size(compact) < _size(plain) else plain


def _count(value: Any, counts: dict[str, int]) -> None:
    if isinstance(value, str):
        counts[value] = counts.get(value, 0) + 1
    elif isinstance(value, list):
        for item in value:
            _count(item, counts)
    elif isinstance(value, dict):
        for key, item in value.items():
            _count(key, counts)
            _count(item, counts)


def _replaced(value: Any, table: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return table.get(value, value)
    if isinstance(value, list):
        return [_replaced(item, table) for item in value]
    if isinstance(value, dict):
        return {table.get(k, k): _replaced(v, table) for k, v in value.items()}
    return value


# -- reading -------------------------------------------------------------------------------------


def compact_validate(payload: Mapping[str, object], *, type: Any = None, device: Any = None) -> Any:
    """The value (a list for a plural kind) a compact envelope holds; `type` (a class, or
    `list[class]`) checks the kind; `device` moves tensorized values there."""
    if not isinstance(payload, Mapping) or set(payload) != _ENVELOPE:
        raise InvalidInputError(
            "a compact payload holds exactly format, version, kind, strings and data"
        )
    kind = payload["kind"]
    if not isinstance(kind, str) or (kind not in _KINDS and kind not in _SINGULAR):
        raise InvalidInputError(f"unsupported compact trajectory kind: {kind!r}")
    if payload["format"] != FORMAT:
        raise InvalidInputError(f"unsupported compact trajectory format {payload['format']!r}")
    if payload["version"] != VERSION or isinstance(payload["version"], bool):
        raise InvalidInputError(f"unsupported compact trajectory version {payload['version']!r}")
    target = _target(type, kind) if type is not None else None
    if device is not None and not kind.startswith("tensorized_"):
        raise InvalidInputError("device is only valid for tensorized compact payloads")
    data = _decoded(payload["data"], _strings(payload["strings"]))
    if kind in _SINGULAR:
        if not isinstance(data, list):
            raise InvalidInputError("a compact collection's data must be a list")
        return [_value(item, _SINGULAR[kind], target, device) for item in data]
    return _value(data, kind, target, device)


def compact_validate_json(
    payload: str | bytes | bytearray | memoryview, *, type: Any = None, device: Any = None
) -> Any:
    """`compact_validate` of JSON text; NaN and Infinity literals are refused, as in ART (a
    payload holding them is read with `compact_validate(json.loads(text))`)."""

    def refuse(literal: str) -> float:
        raise InvalidInputError(f"compact JSON may not hold {literal}; use compact_validate()")

    text = bytes(payload) if isinstance(payload, bytearray | memoryview) else payload
    return compact_validate(json.loads(text, parse_constant=refuse), type=type, device=device)


def _target(requested: Any, kind: str) -> type[BaseModel]:
    plural = get_origin(requested) is list
    cls = get_args(requested)[0] if plural and len(get_args(requested)) == 1 else requested
    found = _kind_of_class(cls) if isinstance(cls, type) else None
    if found is None:
        raise TypeError("type must be a supported compact model or list[model]")
    expected = _KINDS[found][0] if plural else found
    if expected != kind:
        raise InvalidInputError(f"the requested type expects kind {expected!r}, got {kind!r}")
    return cls  # type: ignore[no-any-return]


def _strings(table: object) -> dict[str, str]:
    if not isinstance(table, dict):
        raise InvalidInputError("a compact payload's strings must be a dictionary")
    for key, value in table.items():
        digits = key[1:] if isinstance(key, str) and key.startswith("$") else ""
        if not digits.isdigit() or (digits != "0" and digits.startswith("0")):
            raise InvalidInputError(f"invalid compact trajectory string reference: {key!r}")
        if not isinstance(value, str):
            raise InvalidInputError("a compact payload's string table holds strings only")
    return dict(table)


def _decoded(value: Any, table: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return table.get(value, value)
    if isinstance(value, list):
        return [_decoded(item, table) for item in value]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = table.get(key, key)
            if name in out:
                raise InvalidInputError(f"compact decoding gives the key {name!r} twice")
            out[name] = _decoded(item, table)
        return out
    if value is None or isinstance(value, bool | int | float):
        return value
    raise InvalidInputError(f"compact data is not JSON: {type(value).__name__}")


def _value(data: Any, kind: str, target: type[BaseModel] | None, device: Any) -> Any:
    classes = _classes()
    if kind.startswith("tensorized_") and kind not in classes:
        import importlib

        importlib.import_module(_TENSORS)  # needs torch: arthex[local]
        classes = _classes()
    cls = target or classes[kind]
    data = dict(_mapping(data, f"a compact {kind}"))
    if kind.endswith("_history"):
        if set(data) != {"value", "exchanges"}:
            raise InvalidInputError("a compact tokenized history holds value and exchanges")
        value = dict(_mapping(data["value"], "a tokenized history"))
        calls = _Calls([dict(_mapping(c, "an exchange")) for c in data["exchanges"]], fixed=True)
        _swap_sources(value.get("history"), calls, encode=False)
        data = value
    elif kind.endswith("_group") and kind != "trajectory_group":
        sources = _mapping(data.get("trajectory_group"), "a source group").get("trajectories")
        children = data.get("trajectories")
        if not isinstance(sources, list) or not isinstance(children, list):
            raise InvalidInputError("a compact group's trajectories must be lists")
        if len(sources) != len(children):
            raise InvalidInputError("a tokenized group differs in length from its source group")
        multi = {"histories" in _mapping(c, "a tokenized trajectory") for c in children}
        if len(multi) > 1:
            raise InvalidInputError("a compact tokenized group mixes trajectory types")
        for child, source in zip(children, sources, strict=True):
            child["trajectory"] = source
            _swap_histories(child, _Calls.of(source), encode=False)
        if not cls.__pydantic_generic_metadata__["args"]:
            one = "multi_history_trajectory" if True in multi else "trajectory"
            member = classes[f"{kind.split('_')[0]}_{one}"]
            cls = classes[kind][member]  # type: ignore[index]
    elif kind not in ("trajectory", "trajectory_group"):
        _swap_histories(data, _Calls.of(data.get("trajectory")), encode=False)
    result = cls.model_validate(data)
    if device is not None:
        result.to_(device)  # type: ignore[attr-defined]
    return result


def _mapping(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInputError(f"{what} must be a JSON object")
    return value


# -- memory --------------------------------------------------------------------------------------


T = TypeVar("T")


def compact_memory(value: T) -> T:
    """Make equal strings in `value` one object (strings in builtin lists and dicts and in the
    fields of pydantic models, keys included), in place; returns `value`. Tuples, frozen
    models and other objects are left as they are; a cycle is visited once."""
    _share(value, {}, set())
    return value


def _share(value: Any, pool: dict[str, str], seen: set[int]) -> Any:
    if isinstance(value, str):
        return pool.setdefault(value, value)
    if id(value) in seen:
        return value
    if isinstance(value, list):
        seen.add(id(value))
        value[:] = [_share(item, pool, seen) for item in value]
    elif type(value) is dict:
        seen.add(id(value))
        items = [(_share(k, pool, seen), _share(v, pool, seen)) for k, v in value.items()]
        value.clear()
        value.update(items)
    elif isinstance(value, BaseModel) and not value.model_config.get("frozen"):
        seen.add(id(value))
        fields = value.__dict__
        for name in list(fields):
            fields[name] = _share(fields[name], pool, seen)
        extra = value.__pydantic_extra__
        if extra:
            _share(extra, pool, seen)
    return value
