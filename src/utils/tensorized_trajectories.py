"""ART's tensorized trajectories (`art.trajectories.tensors`): a tokenized history's tokens,
logprobs and flags as one-dimensional tensors (int64, float32, int32; the top-k alternatives
[tokens, k] int64 and float32; routed experts [tokens, layers, top-k] int32), with ART's
fields, checks and JSON (NaN written "NaN"). Imports torch, so it is loaded only when a value
is tensorized (`pip install "arthex[local]"`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Generic, Protocol, Self, TypeVar

import torch
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationInfo,
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

__all__ = [
    "TensorizedHistory",
    "TensorizedMultiHistoryTrajectory",
    "TensorizedTopK",
    "TensorizedTrajectory",
    "TensorizedTrajectoryGroup",
]


def _vector(value: object, dtype: torch.dtype, label: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        result = value.to(dtype=dtype)
    else:
        if isinstance(value, list | tuple):  # JSON writes NaN as "NaN"
            value = [float(item) if isinstance(item, str) else item for item in value]
        try:
            result = torch.tensor(value, dtype=dtype)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"{label} must be a one-dimensional tensor") from exc
    if result.ndim != 1:
        raise ValueError(f"{label} must be a one-dimensional tensor")
    return result.contiguous()


def _json(value: torch.Tensor) -> list[Any]:
    items = value.detach().cpu().tolist()
    if value.dtype.is_floating_point:
        return ["NaN" if math.isnan(item) else float(item) for item in items]
    return [int(item) for item in items]


class TensorizedTopK(BaseModel):
    """`TokenizedTopK` as [tokens, k] tensors."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    tokens: torch.Tensor
    logprobs: torch.Tensor

    @field_validator("tokens", "logprobs", mode="before")
    @classmethod
    def _matrix(cls, value: object, info: ValidationInfo) -> torch.Tensor:
        if isinstance(value, list):
            value = [
                [float(v) if isinstance(v, str) else v for v in row]
                if isinstance(row, list)
                else row
                for row in value
            ]
        result = value if isinstance(value, torch.Tensor) else torch.tensor(value)
        if result.ndim != 2:
            raise ValueError("top_k fields must have shape [tokens, k]")
        is_tokens = info.field_name == "tokens"
        if is_tokens and (result.dtype == torch.bool or result.dtype.is_floating_point):
            raise ValueError("top_k token IDs must be integers")
        return result.to(dtype=torch.int64 if is_tokens else torch.float32).contiguous()

    @model_validator(mode="after")
    def _shape(self) -> Self:
        if self.tokens.shape != self.logprobs.shape or bool((self.tokens < -1).any()):
            raise ValueError("top_k requires matching shapes and token IDs >= -1")
        return self

    @field_serializer("tokens", "logprobs", when_used="json")
    def _rows(self, value: torch.Tensor) -> list[list[Any]]:
        return [_json(row) for row in value]

    def to(self, device: torch.device | str, *, copy: bool = True) -> Self:
        return self.model_copy(
            update={
                "tokens": self.tokens.to(device=device, copy=copy),
                "logprobs": self.logprobs.to(device=device, copy=copy),
            }
        )


class TensorizedHistory(BaseModel):
    """One history's tokens, logprobs and flags as tensors."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    history: TrajectoryHistory
    model: str
    tokens: torch.Tensor
    logprobs: torch.Tensor
    flags: torch.Tensor
    routed_experts: torch.Tensor | None = Field(default=None, exclude_if=lambda v: v is None)
    top_k: TensorizedTopK | None = Field(default=None, exclude_if=lambda v: v is None)

    @field_serializer("history")
    def _history_json(self, value: TrajectoryHistory) -> dict[str, JsonValue]:
        return history_json(value)

    @field_validator("history", mode="before")
    @classmethod
    def _history_from_json(cls, value: object) -> object:
        return history_from_json(value)

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens(cls, value: object) -> torch.Tensor:
        return _vector(value, torch.int64, "tokens")

    @field_validator("logprobs", mode="before")
    @classmethod
    def _logprobs(cls, value: object) -> torch.Tensor:
        return _vector(value, torch.float32, "logprobs")

    @field_validator("flags", mode="before")
    @classmethod
    def _flags(cls, value: object) -> torch.Tensor:
        return _vector(value, torch.int32, "flags")

    @field_validator("routed_experts", mode="before")
    @classmethod
    def _routes(cls, value: object) -> torch.Tensor | None:
        if value is None:
            return None
        result = value if isinstance(value, torch.Tensor) else torch.tensor(value)
        if result.dtype == torch.bool or result.dtype.is_floating_point:
            raise ValueError("routed_experts must contain integer expert IDs")
        if result.ndim != 3 or min(result.shape[1:]) <= 0:
            raise ValueError("routed_experts must have shape [tokens, layers, top-k]")
        if bool(((result < -1) | (result > 65535)).any()):
            raise ValueError("routed_experts IDs must be in [-1, 65535]")
        return result.to(dtype=torch.int32).contiguous()

    @field_serializer("routed_experts", when_used="json")
    def _routes_json(self, value: torch.Tensor | None) -> object:
        return value.detach().cpu().tolist() if value is not None else None

    @field_serializer("tokens", "logprobs", "flags", when_used="json")
    def _vector_json(self, value: torch.Tensor) -> list[Any]:
        return _json(value)

    @model_validator(mode="after")
    def _tokenwise(self) -> Self:
        n = len(self.tokens)
        if not n == len(self.logprobs) == len(self.flags):
            raise ValueError("Tensorized history fields differ in length")
        if self.top_k is not None and len(self.top_k.tokens) != n:
            raise ValueError("Tensorized top_k differs in length from tokens")
        if self.routed_experts is not None and len(self.routed_experts) != n:
            raise ValueError("Tensorized routed_experts differs in length from tokens")
        sampled = self.flags.bitwise_and(int(TokenFlag.SAMPLED)).bool()
        exact = self.flags.bitwise_and(int(TokenFlag.EXACT)).bool()
        if bool((sampled & ~exact).any()):
            raise ValueError("SAMPLED tokens must also be EXACT; regenerate this tokenization")
        self.flags = self.flags.bitwise_or(sampled.to(self.flags.dtype) * int(TokenFlag.OUTPUT))
        return self

    def to(self, device: torch.device | str) -> Self:
        """A copy whose tensors (copies) are on `device`."""
        result = self.model_copy()
        result.to_(device, copy=True)
        return result

    def to_(self, device: torch.device | str, *, copy: bool = False) -> None:
        """Move the tensors to `device`, in place."""
        self.tokens = self.tokens.to(device=device, copy=copy)
        self.logprobs = self.logprobs.to(device=device, copy=copy)
        self.flags = self.flags.to(device=device, copy=copy)
        if self.top_k is not None:
            self.top_k = self.top_k.to(device, copy=copy)
        if self.routed_experts is not None:
            self.routed_experts = self.routed_experts.to(device=device, copy=copy)


class TensorizedTrajectory(TrajectoryFields, TensorizedHistory):
    """`TokenizedTrajectory` as tensors."""

    trajectory: Trajectory


class TensorizedMultiHistoryTrajectory(TrajectoryFields, BaseModel):
    """`TokenizedMultiHistoryTrajectory` as tensors."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    trajectory: Trajectory
    histories: list[TensorizedHistory]

    def to(self, device: torch.device | str) -> Self:
        return self.model_copy(update={"histories": [h.to(device) for h in self.histories]})

    def to_(self, device: torch.device | str) -> None:
        for history in self.histories:
            history.to_(device)

    def first_occurrence_masks(self, *, where: TokenFlag | None = None) -> list[torch.Tensor]:
        return tensor_prefix_masks(self.histories, where)


TensorizedTrajectoryT = TypeVar(
    "TensorizedTrajectoryT", TensorizedTrajectory, TensorizedMultiHistoryTrajectory
)


class TensorizedTrajectoryGroup(GroupFields, BaseModel, Generic[TensorizedTrajectoryT]):
    """`TokenizedTrajectoryGroup` as tensors."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    trajectory_group: TrajectoryGroup
    trajectories: list[TensorizedTrajectoryT]

    @model_validator(mode="after")
    def _one_per_source(self) -> Self:
        bind_to_sources("Tensorized", self.trajectories, self.trajectory_group)
        return self

    def to(self, device: torch.device | str) -> Self:
        return self.model_copy(update={"trajectories": [t.to(device) for t in self.trajectories]})

    def to_(self, device: torch.device | str) -> None:
        for trajectory in self.trajectories:
            trajectory.to_(device)


def tensor_prefix_masks(
    histories: list[TensorizedHistory], where: TokenFlag | None
) -> list[torch.Tensor]:
    rows = [(h.model, h.tokens.tolist(), h.flags.tolist()) for h in histories]
    return [
        torch.tensor(mask, dtype=torch.bool, device=h.tokens.device)
        for mask, h in zip(prefix_masks(rows, where), histories)
    ]


class TokenizedLike(Protocol):
    """What tensorizing reads of a tokenized history (`tokenized_trajectories`, which imports
    this module, not the reverse)."""

    @property
    def history(self) -> TrajectoryHistory: ...
    @property
    def model(self) -> str: ...
    @property
    def tokens(self) -> Sequence[int]: ...
    @property
    def logprobs(self) -> Sequence[float]: ...
    @property
    def flags(self) -> Sequence[int]: ...
    @property
    def top_k(self) -> Any: ...
    @property
    def routed_experts(self) -> Sequence[Any] | None: ...


class TokenizedOfTrajectory(TokenizedLike, Protocol):
    @property
    def trajectory(self) -> Trajectory: ...


class MultiTokenizedLike(Protocol):
    @property
    def trajectory(self) -> Trajectory: ...
    @property
    def histories(self) -> Sequence[TokenizedLike]: ...


class TokenizedGroupLike(Protocol):
    @property
    def trajectory_group(self) -> TrajectoryGroup: ...
    @property
    def trajectories(self) -> Sequence[Any]: ...


def _fields(value: TokenizedLike, device: Any) -> dict[str, Any]:
    at = device or "cpu"
    top_k = value.top_k
    return {
        "history": value.history,
        "model": value.model,
        "tokens": torch.tensor(list(value.tokens), dtype=torch.int64, device=at),
        "logprobs": torch.tensor(list(value.logprobs), dtype=torch.float32, device=at),
        "flags": torch.tensor([int(f) for f in value.flags], dtype=torch.int32, device=at),
        "top_k": None
        if top_k is None
        else TensorizedTopK(
            tokens=torch.tensor(top_k.tokens, dtype=torch.int64, device=at),
            logprobs=torch.tensor(top_k.logprobs, dtype=torch.float32, device=at),
        ),
        "routed_experts": None
        if value.routed_experts is None
        else torch.tensor(value.routed_experts, dtype=torch.int32, device=at),
    }


def tensorize_history(value: TokenizedLike, *, device: Any = None) -> TensorizedHistory:
    return TensorizedHistory(**_fields(value, device))


def tensorize_trajectory(
    value: TokenizedOfTrajectory, *, device: Any = None
) -> TensorizedTrajectory:
    return TensorizedTrajectory(**_fields(value, device), trajectory=value.trajectory)


def tensorize_multi_history_trajectory(
    value: MultiTokenizedLike, *, device: Any = None
) -> TensorizedMultiHistoryTrajectory:
    return TensorizedMultiHistoryTrajectory(
        trajectory=value.trajectory,
        histories=[tensorize_history(h, device=device) for h in value.histories],
    )


def tensorize_group(
    value: TokenizedGroupLike, *, multi: bool, device: Any = None
) -> TensorizedTrajectoryGroup[Any]:
    """`multi`: the group holds multi-history trajectories."""
    items = value.trajectories
    if any(hasattr(t, "histories") != multi for t in items):
        raise ValueError("Tokenized group mixes trajectory types")
    if multi:
        return TensorizedTrajectoryGroup[TensorizedMultiHistoryTrajectory](
            trajectory_group=value.trajectory_group,
            trajectories=[tensorize_multi_history_trajectory(t, device=device) for t in items],
        )
    return TensorizedTrajectoryGroup[TensorizedTrajectory](
        trajectory_group=value.trajectory_group,
        trajectories=[tensorize_trajectory(t, device=device) for t in items],
    )
