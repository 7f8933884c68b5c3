"""ART's tokenized trajectories (`art.trajectories`' `Tokenized*` and `first_occurrence_masks`):
a trajectory's histories as token ids, with one logprob (NaN: unknown) and one `TokenFlag` set
per token, with the source history and trajectory, under ART's names, fields, checks and JSON
shape (a history is written `{"kind": ..., "data": ...}`, NaN as "NaN"). `trajectory_tokenizing`
makes them from trajectories; `tensorized_trajectories` turns them into tensors.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictInt,
    field_serializer,
    field_validator,
    model_validator,
)

from ..core.trajectories import Trajectory, TrajectoryGroup
from .art_trajectories import TokenFlag, TrajectoryHistory
from .tokenized_common import (
    GroupFields,
    TrajectoryFields,
    bind_to_sources,
    history_from_json,
    history_json,
    prefix_masks,
)

if TYPE_CHECKING:
    from .tensorized_trajectories import (
        TensorizedHistory,
        TensorizedMultiHistoryTrajectory,
        TensorizedTrajectory,
        TensorizedTrajectoryGroup,
    )

__all__ = [
    "TokenizedHistory",
    "TokenizedMultiHistoryTrajectory",
    "TokenizedTopK",
    "TokenizedTrajectory",
    "TokenizedTrajectoryGroup",
    "first_occurrence_masks",
]


class TokenizedTopK(BaseModel):
    """The top-k alternatives per token: `tokens[i][j]` and `logprobs[i][j]` (id -1 and NaN
    where a row has fewer)."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    tokens: list[list[StrictInt]]
    logprobs: list[list[float]]

    @model_validator(mode="after")
    def _rectangular(self) -> Self:
        if len(self.tokens) != len(self.logprobs):
            raise ValueError("top_k fields differ in length")
        widths = {len(row) for row in self.tokens + self.logprobs}
        if len(widths) > 1 or any(token < -1 for row in self.tokens for token in row):
            raise ValueError("top_k requires rectangular arrays and token IDs >= -1")
        return self


class TokenizedHistory(BaseModel):
    """One history's tokens, with a logprob (NaN: unknown) and flags per token."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    history: TrajectoryHistory
    model: str
    tokens: list[int]
    logprobs: list[float]
    flags: list[TokenFlag]
    routed_experts: list[list[list[StrictInt]]] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    top_k: TokenizedTopK | None = Field(default=None, exclude_if=lambda value: value is None)

    @field_serializer("history")
    def _history_json(self, value: TrajectoryHistory) -> dict[str, JsonValue]:
        return history_json(value)

    @field_validator("history", mode="before")
    @classmethod
    def _history_from_json(cls, value: object) -> object:
        return history_from_json(value)

    @model_validator(mode="after")
    def _tokenwise(self) -> Self:
        n = len(self.tokens)
        if not n == len(self.logprobs) == len(self.flags):
            raise ValueError("Tokenized history fields differ in length")
        if self.top_k is not None and len(self.top_k.tokens) != n:
            raise ValueError("Tokenized top_k differs in length from tokens")
        if self.routed_experts is not None:
            _check_routes(self.routed_experts, n)
        if any(f & TokenFlag.SAMPLED and not f & TokenFlag.EXACT for f in self.flags):
            raise ValueError("SAMPLED tokens must also be EXACT; regenerate this tokenization")
        if any(f & TokenFlag.SAMPLED and not f & TokenFlag.OUTPUT for f in self.flags):
            # a sampled token is output by definition (dumps from before OUTPUT existed)
            self.flags = [f | TokenFlag.OUTPUT if f & TokenFlag.SAMPLED else f for f in self.flags]
        return self

    def tensorize(self, *, device: Any = None) -> TensorizedHistory:
        from .tensorized_trajectories import tensorize_history

        return tensorize_history(self, device=device)


class TokenizedTrajectory(TrajectoryFields, TokenizedHistory):
    """A trajectory's one history, tokenized, with the trajectory."""

    trajectory: Trajectory

    def tensorize(self, *, device: Any = None) -> TensorizedTrajectory:
        from .tensorized_trajectories import tensorize_trajectory

        return tensorize_trajectory(self, device=device)


class TokenizedMultiHistoryTrajectory(TrajectoryFields, BaseModel):
    """Each of a trajectory's histories, tokenized, with the trajectory."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    trajectory: Trajectory
    histories: list[TokenizedHistory]

    def tensorize(self, *, device: Any = None) -> TensorizedMultiHistoryTrajectory:
        from .tensorized_trajectories import tensorize_multi_history_trajectory

        return tensorize_multi_history_trajectory(self, device=device)

    def first_occurrence_masks(self, *, where: TokenFlag | None = None) -> list[list[bool]]:
        """See `first_occurrence_masks`."""
        return prefix_masks([(h.model, h.tokens, h.flags) for h in self.histories], where)


TokenizedTrajectoryT = TypeVar(
    "TokenizedTrajectoryT", TokenizedTrajectory, TokenizedMultiHistoryTrajectory
)


class TokenizedTrajectoryGroup(GroupFields, BaseModel, Generic[TokenizedTrajectoryT]):
    """A group's trajectories, tokenized in order, with the group (whose metrics and metadata
    it passes through)."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    trajectory_group: TrajectoryGroup
    trajectories: list[TokenizedTrajectoryT]

    @model_validator(mode="after")
    def _one_per_source(self) -> Self:
        bind_to_sources("Tokenized", self.trajectories, self.trajectory_group)
        return self

    def tensorize(self, *, device: Any = None) -> TensorizedTrajectoryGroup[Any]:
        from .tensorized_trajectories import tensorize_group

        args = type(self).__pydantic_generic_metadata__["args"]
        multi = any(isinstance(t, TokenizedMultiHistoryTrajectory) for t in self.trajectories)
        multi |= args == (TokenizedMultiHistoryTrajectory,)
        return tensorize_group(self, multi=multi, device=device)


def _check_routes(routes: list[list[list[int]]], length: int) -> None:
    if len(routes) != length:
        raise ValueError("routed_experts differs in length from tokens")
    shapes = {(len(row), len(layer)) for row in routes for layer in row}
    widths = {len(row) for row in routes}
    if len(widths) > 1 or any(0 in shape for shape in shapes) or len(shapes) > 1:
        raise ValueError("routed_experts must have shape [tokens, layers, top-k]")
    if any(not -1 <= e <= 65535 for row in routes for layer in row for e in layer):
        raise ValueError("routed_experts IDs must be in [-1, 65535]")


# -- first occurrences --------------------------------------------------------------------------


def first_occurrence_masks(
    histories: Iterable[TokenizedHistory] | Iterable[TensorizedHistory],
    *,
    where: TokenFlag | None = None,
) -> Any:
    """For each history, a mask of the positions whose model-visible prefix occurs there first
    (see `prefix_masks`): lists for tokenized histories, bool tensors for tensorized ones.
    `where=TokenFlag.SAMPLED` selects each sampled token once across histories that share
    their beginnings."""
    values: list[Any] = list(histories)
    if all(isinstance(h, TokenizedHistory) for h in values):
        return prefix_masks([(h.model, h.tokens, h.flags) for h in values], where)
    from .tensorized_trajectories import TensorizedHistory, tensor_prefix_masks

    if all(isinstance(h, TensorizedHistory) for h in values):
        return tensor_prefix_masks(values, where)
    raise TypeError("histories must be uniformly tokenized or tensorized")
