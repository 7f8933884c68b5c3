"""What ART's tokenized and tensorized trajectories share (tokenized_trajectories,
tensorized_trajectories): a history's JSON inside them (`{"kind": ..., "data": ...}`, ART's tags),
the pass-throughs to the source trajectory, and the first-occurrence masks over token prefixes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, JsonValue

from ..core.trajectories import History, Trajectory, TrajectoryGroup
from .art_trajectories import (
    AnthropicMessagesHistory,
    ChatCompletionsHistory,
    CompletionsStringHistory,
    CompletionsTokenHistory,
    ResponsesHistory,
    TokenFlag,
)

# ART's tags for a history's class in a tokenized history's JSON.
HISTORY_KINDS: dict[type[BaseModel], str] = {
    History: "legacy",
    ChatCompletionsHistory: "chat_completions",
    AnthropicMessagesHistory: "messages",
    ResponsesHistory: "responses",
    CompletionsTokenHistory: "completions_token",
    CompletionsStringHistory: "completions_string",
}
_BY_KIND = {kind: cls for cls, kind in HISTORY_KINDS.items()}


def history_json(history: object) -> dict[str, JsonValue]:
    """A history as ART writes it inside a tokenized one: its kind and its JSON."""
    kind = HISTORY_KINDS.get(type(history)) if isinstance(history, BaseModel) else None
    if kind is None or not isinstance(history, BaseModel):
        raise TypeError(f"unsupported history type: {type(history).__name__}")
    return {"kind": kind, "data": history.model_dump(mode="json")}


def history_from_json(value: object) -> object:
    if isinstance(value, tuple(HISTORY_KINDS)):
        return value
    if not isinstance(value, dict) or set(value) != {"kind", "data"}:
        raise ValueError("a tokenized history's `history` must be {'kind': ..., 'data': {...}}")
    cls = _BY_KIND.get(value["kind"])
    if cls is None:
        raise ValueError(f"unknown history kind {value['kind']!r}; one of {sorted(_BY_KIND)}")
    return cls.model_validate(value["data"])


class TrajectoryFields:
    """ART's pass-throughs to the source trajectory's reward, metrics and metadata."""

    if TYPE_CHECKING:
        trajectory: Trajectory

    @property
    def reward(self) -> float:
        return self.trajectory.reward

    @reward.setter
    def reward(self, value: float) -> None:
        self.trajectory.reward = value

    @property
    def metrics(self) -> dict[str, Any]:
        return self.trajectory.metrics

    @metrics.setter
    def metrics(self, value: dict[str, Any]) -> None:
        self.trajectory.metrics = value

    @property
    def metadata(self) -> dict[str, Any]:
        return self.trajectory.metadata

    @metadata.setter
    def metadata(self, value: dict[str, Any]) -> None:
        self.trajectory.metadata = value


class GroupFields:
    """ART's pass-throughs to the source group's metrics and metadata."""

    if TYPE_CHECKING:
        trajectory_group: TrajectoryGroup

    @property
    def metrics(self) -> dict[str, Any]:
        return self.trajectory_group.metrics

    @metrics.setter
    def metrics(self, value: dict[str, Any]) -> None:
        self.trajectory_group.metrics = value

    @property
    def metadata(self) -> dict[str, Any]:
        return self.trajectory_group.metadata

    @metadata.setter
    def metadata(self, value: dict[str, Any]) -> None:
        self.trajectory_group.metadata = value


def same_trajectory(one: Trajectory, other: Trajectory) -> bool:
    """Equal dumps, NaN equal to NaN (a metric may be NaN)."""
    return one.model_dump_json() == other.model_dump_json()


def bind_to_sources(form: str, converted: Sequence[Any], group: TrajectoryGroup) -> None:
    """Check a group's `converted` trajectories (each with a `.trajectory`) are its own, one per
    source in order, and make each hold the source object itself, as in ART: edits show in
    both. `form` ("Tokenized", "Tensorized") names them in the error."""
    sources = group.trajectories
    if len(converted) != len(sources):
        raise ValueError(f"{form} group differs in length from its source group")
    for item, source in zip(converted, sources, strict=True):
        if item.trajectory is not source and not same_trajectory(item.trajectory, source):
            raise ValueError(f"{form} trajectory does not match its source group")
        item.trajectory = source


class _PrefixNode:
    __slots__ = ("children", "claimed")

    def __init__(self) -> None:
        self.children: dict[int, _PrefixNode] = {}
        self.claimed = False


def prefix_masks(
    rows: Sequence[tuple[str, Sequence[int], Sequence[int]]], where: TokenFlag | None
) -> list[list[bool]]:
    """Per (model, tokens, flags) row, True where the token ends a model-visible prefix (the
    same model, the same tokens up to here) seen here first among the eligible positions
    (those carrying any of `where`'s bits; all when None). An ineligible position claims
    nothing, so a later history may still select it."""
    roots: dict[str, _PrefixNode] = {}
    masks: list[list[bool]] = []
    for model, tokens, flags in rows:
        if len(tokens) != len(flags):
            raise ValueError("tokens and flags differ in length")
        node = roots.setdefault(model, _PrefixNode())
        mask: list[bool] = []
        for token, flag in zip(tokens, flags):
            node = node.children.setdefault(int(token), _PrefixNode())
            first = (where is None or bool(int(flag) & int(where))) and not node.claimed
            node.claimed |= first
            mask.append(first)
        masks.append(mask)
    return masks
