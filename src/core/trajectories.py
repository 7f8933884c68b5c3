"""Trajectories (one rollout) and groups (rollouts of one scenario), as users build them."""

from __future__ import annotations

import asyncio
import inspect
import math
import traceback as traceback_module
from collections.abc import Awaitable, Coroutine, Iterable, Iterator, Sequence
from typing import Annotated, Any, TypeAlias

from openai.types.chat.chat_completion import Choice
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.functional_validators import BeforeValidator

from .exchanges import TrajectoryExchanges

Message: TypeAlias = dict[str, Any]
MetricValue: TypeAlias = float | int | bool
MetadataValue: TypeAlias = str | int | float | bool | None


def _as_choice_or_message(item: object) -> object:
    """A Choice stays a Choice; a dict shaped like a Choice (it has `finish_reason`) becomes one,
    so trajectories read back from JSON are trainable again; other dicts are context messages."""
    if isinstance(item, Choice):
        return item
    if isinstance(item, dict):
        if "finish_reason" in item and "message" in item:
            return Choice.model_validate(item)
        return item
    if isinstance(item, BaseModel) and hasattr(item, "finish_reason"):
        return Choice.model_validate(item.model_dump())
    raise TypeError(
        f"messages_and_choices items must be chat message dicts or openai Choice objects, "
        f"got {type(item).__name__}"
    )


def _items(value: object) -> object:
    if isinstance(value, list | tuple):
        return [_as_choice_or_message(item) for item in value]
    return value


MessageOrChoice: TypeAlias = Choice | Message
MessagesAndChoices: TypeAlias = Annotated[list[MessageOrChoice], BeforeValidator(_items)]


class History(BaseModel):
    """An extra conversation inside a trajectory, e.g. a sub-agent's."""

    model_config = ConfigDict(extra="forbid")

    messages_and_choices: MessagesAndChoices = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None


INCOMPLETE_KEY = "capture_incomplete"
"""Metadata flag of a captured trajectory whose agent raised before the scope ended."""


class Trajectory(BaseModel):
    """One rollout: the conversation (dict messages and the model's Choices), tools, a reward.

    Only `Choice` items are trained: they carry the sampled tokens and logprobs. A captured
    trajectory (`arthex.capture`) holds its recorded calls in `exchanges` instead, and may not
    also hold messages, tools or additional histories (as in ART).
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    exchanges: TrajectoryExchanges = Field(default_factory=TrajectoryExchanges)
    messages_and_choices: MessagesAndChoices = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    additional_histories: list[History] = Field(default_factory=list)
    reward: float = 0.0
    metrics: dict[str, MetricValue] = Field(default_factory=dict)
    metadata: dict[str, MetadataValue] = Field(default_factory=dict)
    logs: list[str] = Field(default_factory=list)

    @field_validator("reward")
    @classmethod
    def _finite_reward(cls, reward: float) -> float:
        if not math.isfinite(reward):
            raise ValueError(f"reward must be a finite number, got {reward!r}")
        return reward

    @model_validator(mode="after")
    def _one_representation(self) -> Trajectory:
        if self.exchanges and self.is_legacy():
            raise ValueError(
                "a trajectory holds either captured exchanges or messages_and_choices / tools / "
                "additional_histories, not both; put the recorded calls and the hand-built "
                "conversation in separate trajectories"
            )
        return self

    def is_legacy(self) -> bool:
        """Whether the trajectory holds hand-built conversation fields."""
        return bool(
            self.messages_and_choices or self.tools is not None or self.additional_histories
        )

    @property
    def incomplete(self) -> bool:
        """True for a captured trajectory whose agent raised before its scope ended."""
        return self.metadata.get(INCOMPLETE_KEY) is True

    def log(self, message: str) -> None:
        self.logs.append(message)

    def choices(self) -> Iterator[Choice]:
        """Every Choice, in the main conversation and then in the additional histories; for a
        captured trajectory, every choice of every recorded chat completion (with the
        response's `prompt_token_ids` copied onto the choice where only the response has it,
        as vLLM returns them)."""
        for exchange in self.exchanges.chat_completions:
            prompt = (exchange.response.model_extra or {}).get("prompt_token_ids")
            for choice in exchange.response.choices:
                extra = choice.model_extra or {}
                if prompt is not None and "prompt_token_ids" not in extra:
                    choice = choice.model_copy()
                    choice.__pydantic_extra__ = {**extra, "prompt_token_ids": prompt}
                yield choice
        for item in self.messages_and_choices:
            if isinstance(item, Choice):
                yield item
        for history in self.additional_histories:
            for item in history.messages_and_choices:
                if isinstance(item, Choice):
                    yield item

    def messages(self) -> list[Message]:
        """The conversation as plain chat messages (Choices become assistant messages); for a
        captured trajectory, its main conversation as rebuilt from the recorded calls."""
        if self.exchanges:
            from .capture.conversations import conversations  # it builds on this module

            found = conversations(self)
            return [dict(message) for message in found[0].messages] if found else []
        return [_as_message(item) for item in self.messages_and_choices]


def _as_message(item: MessageOrChoice) -> Message:
    if isinstance(item, Choice):
        message: Message = {"role": "assistant", "content": item.message.content or ""}
        if item.message.tool_calls:
            message["tool_calls"] = [
                call.model_dump(mode="json") for call in item.message.tool_calls
            ]
        return message
    copy = dict(item)
    if copy.get("content") is None:
        copy["content"] = ""
    return copy


class CapturedException(BaseModel):
    """A rollout that raised: its qualified class name, message and formatted traceback.

    A captured rollout also keeps what it recorded before it raised, as `trajectory` (flagged
    incomplete): the calls are stored with the group, never trained unless
    `TrainConfig(train_incomplete_trajectories=True)`. ART's reader ignores the field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str
    message: str
    traceback: str = ""
    trajectory: Trajectory | None = None

    @classmethod
    def from_exception(
        cls, error: BaseException, trajectory: Trajectory | None = None
    ) -> CapturedException:
        kind = type(error)
        name = (
            kind.__qualname__
            if kind.__module__ == "builtins"
            else f"{kind.__module__}.{kind.__qualname__}"
        )
        formatted = "".join(traceback_module.format_exception(kind, error, error.__traceback__))
        return cls(type=name, message=str(error), traceback=formatted, trajectory=trajectory)

    @field_validator("type")
    @classmethod
    def _qualified_name(cls, value: str) -> str:
        if value.startswith("<class '") and value.endswith("'>"):
            return value[len("<class '") : -2]
        return value


class TrajectoryGroup(BaseModel):
    """Rollouts of one scenario, trained relative to each other, plus the rollouts that failed.

    `TrajectoryGroup([t1, t2, error])` and `TrajectoryGroup(trajectories=[t1, t2])` both work;
    input order is kept and exceptions become `CapturedException` entries.
    """

    model_config = ConfigDict(extra="forbid")

    trajectories: list[Trajectory] = Field(default_factory=list)
    exceptions: list[CapturedException] = Field(default_factory=list)
    metadata: dict[str, MetadataValue] = Field(default_factory=dict)
    metrics: dict[str, MetricValue] = Field(default_factory=dict)
    logs: list[str] = Field(default_factory=list)

    def __init__(
        self,
        trajectories: Iterable[Trajectory | BaseException | dict[str, Any]] = (),
        *,
        exceptions: Iterable[BaseException | CapturedException | dict[str, Any]] = (),
        metadata: dict[str, MetadataValue] | None = None,
        metrics: dict[str, MetricValue] | None = None,
        logs: list[str] | None = None,
    ) -> None:
        items = list(trajectories)
        if any(inspect.isawaitable(item) for item in items):
            raise TypeError(
                "TrajectoryGroup takes finished trajectories; to await rollouts use "
                "`await arthex.trajectory_group(rollouts)`"
            )
        kept: list[Trajectory | dict[str, Any]] = []
        captured: list[CapturedException | dict[str, Any]] = []
        for item in items:
            if isinstance(item, BaseException):
                captured.append(CapturedException.from_exception(item))
            else:
                kept.append(item)
        for error in exceptions:
            captured.append(
                CapturedException.from_exception(error)
                if isinstance(error, BaseException)
                else error
            )
        super().__init__(
            trajectories=kept,
            exceptions=captured,
            metadata=metadata or {},
            metrics=metrics or {},
            logs=logs or [],
        )

    def __iter__(self) -> Iterator[Trajectory]:  # type: ignore[override]
        return iter(self.trajectories)

    def __len__(self) -> int:
        return len(self.trajectories)


def trajectory_group(
    rollouts: Iterable[Awaitable[Trajectory]],
    *,
    metadata: dict[str, MetadataValue] | None = None,
    metrics: dict[str, MetricValue] | None = None,
    logs: list[str] | None = None,
) -> Coroutine[Any, Any, TrajectoryGroup]:
    """Await rollouts concurrently; keep input order; a rollout that raises an `Exception`
    becomes an exception entry (a `BaseException` such as cancellation propagates).

    The rollouts are taken from `rollouts` now, not when the group is awaited, so a generator
    over a loop variable (`trajectory_group(rollout(t) for _ in range(8))` inside
    `for t in tickets`) captures each `t` as it is at the call.
    """
    awaitables = list(rollouts)

    async def gather() -> TrajectoryGroup:
        results = await asyncio.gather(*awaitables, return_exceptions=True)
        items: list[Trajectory | BaseException] = []
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result
            if not isinstance(result, Trajectory | BaseException):
                raise TypeError(
                    f"a rollout returned {type(result).__name__}, expected a Trajectory"
                )
            items.append(result)
        return TrajectoryGroup(items, metadata=metadata, metrics=metrics, logs=logs)

    return gather()


def count_rollouts(groups: Sequence[TrajectoryGroup]) -> tuple[int, int]:
    """(successful trajectories, captured exceptions) over all groups."""
    return sum(len(g.trajectories) for g in groups), sum(len(g.exceptions) for g in groups)
