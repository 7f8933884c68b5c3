"""The viewer's trajectories of a run: the store's `list_parts` and `open_part`, rows decoded
by its `decode`; a page of groups reads only the row groups that hold them and only the
authoritative columns.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import attrs
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...adapters.layout import (
    TRAJECTORIES,
)
from ...adapters.parquet.decoding import decode, open_part
from ...adapters.parquet.schema import AUTHORITATIVE
from ...adapters.parquet.store import list_parts
from ...core.advantages import group_advantages
from ...core.chat_types import content_text
from ...core.errors import CorruptDataError, InvalidInputError
from ...core.identity import validate_name
from ...core.trajectories import Trajectory, TrajectoryGroup
from .catalog import MAX_PAGE, BadRequest, NotFound, Run
from .runs import splits


@attrs.frozen
class _Part:
    """One part file's groups: where its row groups start and end, in group indexes."""

    path: str
    groups: int  # how many groups the part holds
    row_groups: tuple[tuple[int, int], ...]  # (first, last) group index of each row group


def trajectories(
    run: Run,
    split: str | None,
    step: int | None,
    offset: int,
    limit: int,
    query: str | None = None,
) -> dict[str, Any]:
    if offset < 0:
        raise BadRequest(f"offset must be >= 0, got {offset}")
    if not 1 <= limit <= MAX_PAGE:
        raise BadRequest(f"limit must be between 1 and {MAX_PAGE}, got {limit}")
    errors: list[str] = []
    logged = splits(run, errors)
    if split is None:
        split = "train" if "train" in logged else next(iter(logged), None)
    else:
        try:
            validate_name(split, "split")
        except InvalidInputError as error:
            raise BadRequest(str(error)) from error
    steps = logged.get(split, []) if split is not None else []
    if step is None:
        step = steps[-1] if steps else None
    elif step < 0:
        raise BadRequest(f"step must be >= 0, got {step}")
    answer: dict[str, Any] = {
        "split": split,
        "step": step,
        "splits": logged,
        "offset": offset,
        "limit": limit,
        "total": 0,
        "groups": [],
        "errors": errors,
    }
    if split is None or step is None:
        return answer
    if step not in steps:
        raise NotFound(f"no {split!r} trajectories at step {step} in {run.ref}")
    directory = f"{run.file(TRAJECTORIES)}"
    fs = run.root.filesystem
    for part in list_parts(fs, directory, split, step):
        where = run.root.location(part.path)
        try:
            with open_part(part.path, fs) as (file, _):
                indexed = _index(part.path, file)
                chosen = _matching(file, query) if query else None
                _page(answer, where, file, indexed, chosen)
        except (CorruptDataError, OSError, pa.ArrowException) as error:
            text = str(error).splitlines()[0] if str(error) else type(error).__name__
            errors.append(text if where in text else f"{where}: {text}")
    answer.pop("_seen", None)
    return answer


def _index(path: str, file: pq.ParquetFile) -> _Part:
    """The group index range of each row group, from the footer's statistics when it has
    them, else from the `group_index` column alone."""
    names = file.schema_arrow.names
    missing = [c for c in AUTHORITATIVE if c not in names]
    if missing:
        raise CorruptDataError(f"{path} lacks the column(s) {', '.join(missing)}")
    column = names.index("group_index")
    ranges = []
    for i in range(file.num_row_groups):
        meta = file.metadata.row_group(i)
        if meta.num_rows == 0:
            ranges.append((0, -1))
            continue
        stats = meta.column(column).statistics
        if stats is not None and stats.has_min_max and stats.null_count == 0:
            ranges.append((int(stats.min), int(stats.max)))
            continue
        values = file.read_row_group(i, columns=["group_index"]).column(0)
        low, high = pc.min(values).as_py(), pc.max(values).as_py()
        if low is None or high is None:
            raise CorruptDataError(f"{path}: row group {i} has no group_index")
        ranges.append((int(low), int(high)))
    total = max((high for _, high in ranges), default=-1) + 1
    return _Part(path, total, tuple(ranges))


def _matching(file: pq.ParquetFile, query: str) -> list[int]:
    """Group indexes whose group or trajectory JSON contains `query` (any case), streamed
    batch by batch over two columns."""
    needle = json.dumps(query, ensure_ascii=False)[1:-1]  # as the text appears inside JSON
    found: set[int] = set()
    columns = ["group_index", "trajectory_json", "group_json"]
    for batch in file.iter_batches(batch_size=256, columns=columns):
        hits = pc.or_kleene(
            pc.match_substring(batch.column(1), needle, ignore_case=True),
            pc.match_substring(batch.column(2), needle, ignore_case=True),
        )
        found.update(v for v in pc.filter(batch.column(0), pc.fill_null(hits, False)).to_pylist())
    return sorted(found)


def _page(
    answer: dict[str, Any],
    where: str,
    file: pq.ParquetFile,
    part: _Part,
    chosen: list[int] | None,
) -> None:
    """Add this part's share of the page to `answer` (parts follow one another in order)."""
    first_global = answer.setdefault("_seen", 0)
    candidates = chosen if chosen is not None else range(part.groups)
    count = len(candidates)
    answer["_seen"] = first_global + part.groups
    start = answer["offset"] - answer["total"]
    room = answer["limit"] - len(answer["groups"])
    answer["total"] += count
    if room <= 0 or start >= count:
        return
    wanted = list(candidates[max(0, start) : max(0, start) + room])
    if not wanted:
        return
    low, high = wanted[0], wanted[-1]
    row_groups = [i for i, (a, b) in enumerate(part.row_groups) if a <= high and b >= low]
    table = file.read_row_groups(row_groups, columns=AUTHORITATIVE)
    mask = pc.is_in(table.column("group_index"), value_set=pa.array(wanted, pa.int64()))
    table = table.filter(mask)
    order = {g: i for i, g in enumerate(wanted)}
    renumbered = pa.array([order[g] for g in table.column("group_index").to_pylist()], pa.int64())
    table = table.set_column(AUTHORITATIVE.index("group_index"), "group_index", renumbered)
    for g, group in zip(wanted, decode(where, table)):
        answer["groups"].append(group_json(first_global + g, group))


def group_json(index: int, group: TrajectoryGroup) -> dict[str, Any]:
    rewards = [t.reward for t in group.trajectories]
    advantages = group_advantages(rewards)
    return {
        "index": index,
        "metadata": _jsonable(group.metadata),
        "metrics": _jsonable(group.metrics),
        "logs": list(group.logs),
        "exceptions": [
            {"type": e.type, "message": e.message, "traceback": e.traceback}
            for e in group.exceptions
        ],
        "trajectories": [
            trajectory_json(t, trajectory, advantage)
            for t, (trajectory, advantage) in enumerate(zip(group.trajectories, advantages))
        ],
    }


def trajectory_json(index: int, trajectory: Trajectory, advantage: float) -> dict[str, Any]:
    histories = [
        {"messages": [message_json(m) for m in h.messages_and_choices]}
        for h in trajectory.additional_histories
    ]
    if trajectory.exchanges:
        from ...core.capture.conversations import conversations

        found = conversations(trajectory)
        messages = [message_json(m) for m in found[0].messages] if found else []
        histories += [{"messages": [message_json(m) for m in c.messages]} for c in found[1:]]
        tools: Any = trajectory.tools
    else:
        messages = [message_json(m) for m in trajectory.messages_and_choices]
        tools = trajectory.tools
    return {
        "index": index,
        "reward": trajectory.reward,
        "advantage": advantage,
        "metrics": _jsonable(trajectory.metrics),
        "metadata": _jsonable(trajectory.metadata),
        "logs": list(trajectory.logs),
        "tools": [_tool_name(t) for t in tools or []],
        "messages": messages,
        "additional_histories": histories,
        "captured": bool(trajectory.exchanges),
    }


def _tool_name(tool: Any) -> str:
    if isinstance(tool, Mapping):
        inner = tool.get("function") or tool
        if isinstance(inner, Mapping):
            return str(inner.get("name", "?"))
    return "?"


def message_json(item: Any) -> dict[str, Any]:
    """A message or a Choice as the page shows it: role, text, tool calls, and for a Choice
    (the model's own, trainable turn) its sampled tokens with their logprobs when it has them."""
    from openai.types.chat.chat_completion import Choice

    if isinstance(item, Choice):
        message = item.message
        out: dict[str, Any] = {
            "role": message.role,
            "content": message.content or "",
            "trainable": True,
            "tool_calls": [
                {
                    "id": call.id,
                    "name": getattr(getattr(call, "function", None), "name", "?"),
                    "arguments": getattr(getattr(call, "function", None), "arguments", ""),
                }
                for call in message.tool_calls or []
            ],
        }
        if item.logprobs is not None and item.logprobs.content:
            out["tokens"] = [
                {"token": t.token, "logprob": _finite(t.logprob)} for t in item.logprobs.content
            ]
        return out
    data = item if isinstance(item, Mapping) else {}
    calls = []
    for call in data.get("tool_calls") or []:
        function = call.get("function") or {} if isinstance(call, Mapping) else {}
        calls.append(
            {
                "id": call.get("id") if isinstance(call, Mapping) else None,
                "name": str(function.get("name", "?")),
                "arguments": content_text(function.get("arguments")),
            }
        )
    return {
        "role": str(data.get("role", "?")),
        "content": content_text(data.get("content")),
        "trainable": False,
        "tool_calls": calls,
        "tool_call_id": data.get("tool_call_id"),
        "name": data.get("name"),
    }


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _jsonable(values: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in values.items()
    }
