"""Groups to rows: a batch of trajectory groups as arrow tables in ART's v2 layout (schema.py).

One row per trajectory, or one sentinel row (no trajectory) for a group whose every rollout
failed. Groups are encoded in batches of whole groups (`encode_batches`), each about
`BATCH_BYTES` of JSON, so a writer can compress one batch while the next is serialized and
never holds a whole large part in memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import pyarrow as pa
from openai.types.chat.chat_completion import Choice
from pydantic_core import PydanticSerializationError

from ...core.errors import InvalidInputError
from ...core.trajectories import Trajectory, TrajectoryGroup
from .json_cells import group_json, json_bytes, json_cell, trajectory_cells
from .schema import FORMAT_VERSION, MESSAGE_TYPE, SCHEMA

BATCH_BYTES = 4 << 20
"""JSON bytes per encoded batch (one parquet row group): large enough that per-batch costs
vanish, small enough that a batch in flight is a small fraction of a large part."""


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
                group_json(group),
                json_cell(group.metadata),
                json_cell(group.metrics),
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
                dumped, tools = trajectory_cells(trajectory)
                metrics = json_cell(trajectory.metrics)
                metadata = json_cell(trajectory.metadata)
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
                calls.append(json_bytes(message.tool_calls) if message.tool_calls else None)
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
            calls.append(json_bytes(tool_calls) if tool_calls else None)
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
                fields=list(MESSAGE_TYPE),
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
