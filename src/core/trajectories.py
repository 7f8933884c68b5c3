"""Trajectories (one rollout) and groups (rollouts of one scenario), as users build them."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import time
import traceback as traceback_module
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Coroutine,
    Generator,
    Iterable,
    Iterator,
    Sequence,
)
from datetime import UTC, datetime
from typing import Annotated, Any, TypeAlias, cast

from openai.types.chat.chat_completion import Choice
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)
from pydantic.functional_validators import BeforeValidator

from .chat_types import Messages, as_message
from .exchanges import TrajectoryExchanges

Message: TypeAlias = dict[str, Any]
MetricValue: TypeAlias = float | int | bool
MetadataValue: TypeAlias = str | int | float | bool | None


# Finish reasons a vLLM server reports beyond the ones OpenAI's `Choice` type lists (the
# openai client keeps them as they are, so a trajectory read back must too).
ENGINE_FINISH_REASONS = frozenset({"abort", "repetition"})


def _validated_choice(item: dict[str, Any]) -> Choice:
    reason = item.get("finish_reason")
    if reason not in ENGINE_FINISH_REASONS:
        return Choice.model_validate(item)
    choice = Choice.model_validate({**item, "finish_reason": "stop"})
    object.__setattr__(choice, "finish_reason", reason)
    return choice


def _as_choice_or_message(item: object) -> object:
    """A Choice stays a Choice; a dict shaped like a Choice (it has `finish_reason`) becomes one,
    so trajectories read back from JSON are trainable again; other dicts are context messages."""
    if isinstance(item, Choice):
        return item
    if isinstance(item, dict):
        if "finish_reason" in item and "message" in item:
            return _validated_choice(item)
        return item
    if isinstance(item, BaseModel) and hasattr(item, "finish_reason"):
        return _validated_choice(item.model_dump())
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


def _is_none(value: object) -> bool:
    return value is None


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
    # The training step of the policy that sampled the rollout's first and last completion
    # (set by the pipeline trainer when left None; None means unknown). An unknown version is
    # left out rather than written as null, so files and requests of trajectories that never
    # set one are what they were before the fields (a field-level exclusion: a wrapping model
    # serializer would turn NaN metrics into null in JSON mode).
    initial_policy_version: int | None = Field(default=None, ge=0, exclude_if=_is_none)
    final_policy_version: int | None = Field(default=None, ge=0, exclude_if=_is_none)
    metrics: dict[str, MetricValue] = Field(default_factory=dict)
    metadata: dict[str, MetadataValue] = Field(default_factory=dict)
    logs: list[str] = Field(default_factory=list)
    # When the rollout began, for `finish()`'s duration; process-local, so never serialized.
    start_time: datetime = Field(default_factory=lambda: datetime.now(UTC), exclude=True)

    def __eq__(self, other: object) -> bool:
        # `start_time` is when this process built the object, not part of the rollout: a
        # trajectory read back from a file equals the one written.
        if not isinstance(other, Trajectory):
            return NotImplemented
        mine = {k: v for k, v in self.__dict__.items() if k != "start_time"}
        theirs = {k: v for k, v in other.__dict__.items() if k != "start_time"}
        return type(self) is type(other) and mine == theirs

    __hash__ = None  # type: ignore[assignment]  # mutable, as every pydantic model

    @field_validator("start_time")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

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

    def finish(self) -> Trajectory:
        """Record the seconds since `start_time` as `metrics["duration"]`; returns self."""
        self.metrics["duration"] = (datetime.now(UTC) - self.start_time).total_seconds()
        return self

    @contextlib.asynccontextmanager
    async def track_duration(self, metric_name: str) -> AsyncIterator[None]:
        """Add the seconds spent inside the block to `metrics[f"{metric_name}_duration"]`."""
        started = time.monotonic()
        try:
            yield
        finally:
            key = f"{metric_name}_duration"
            previous = self.metrics.get(key, 0.0)
            self.metrics[key] = float(previous) + (time.monotonic() - started)

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

    def messages(self) -> Messages:
        """The conversation as plain chat messages (Choices become assistant messages), typed
        as the OpenAI SDK's message params so it passes to `chat.completions.create`; for a
        captured trajectory, its main conversation as rebuilt from the recorded calls."""
        if self.exchanges:
            found = self.exchanges.threads()
            return cast(Messages, found[0][0] if found else [])
        return [as_message(item) for item in self.messages_and_choices]


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

    As in ART, the group may also be built from rollout awaitables:
    `await TrajectoryGroup(rollout(s) for _ in range(8))` (or passing the unawaited group to
    `gather_trajectory_groups`) awaits them concurrently, like `trajectory_group`. Unlike ART,
    the object is a `TrajectoryGroup` from the start, pending until awaited (so it type-checks
    as one); `log` and `train` refuse a group whose rollouts were never awaited.
    """

    model_config = ConfigDict(extra="forbid")

    trajectories: list[Trajectory] = Field(default_factory=list)
    exceptions: list[CapturedException] = Field(default_factory=list)
    metadata: dict[str, MetadataValue] = Field(default_factory=dict)
    metrics: dict[str, MetricValue] = Field(default_factory=dict)
    logs: list[str] = Field(default_factory=list)
    _pending: Coroutine[Any, Any, TrajectoryGroup] | None = PrivateAttr(default=None)
    _resolution: asyncio.Future[TrajectoryGroup] | None = PrivateAttr(default=None)

    def __init__(
        self,
        trajectories: Iterable[
            Trajectory | BaseException | dict[str, Any] | Awaitable[Trajectory]
        ] = (),
        *,
        exceptions: Iterable[BaseException | CapturedException | dict[str, Any]] = (),
        metadata: dict[str, MetadataValue] | None = None,
        metrics: dict[str, MetricValue] | None = None,
        logs: list[str] | None = None,
    ) -> None:
        items = list(trajectories)
        if any(inspect.isawaitable(item) for item in items):
            super().__init__(metadata=metadata or {}, metrics=metrics or {}, logs=logs or [])
            self._pending = trajectory_group(
                items,  # type: ignore[arg-type]  # dict items are refused when awaited
                exceptions=exceptions,
                metadata=metadata,
                metrics=metrics,
                logs=logs,
            )
            return
        kept: list[Trajectory | dict[str, Any]] = []
        captured: list[CapturedException | dict[str, Any]] = []
        for item in items:
            if isinstance(item, BaseException):
                captured.append(CapturedException.from_exception(item))
            else:
                kept.append(cast(Trajectory | dict[str, Any], item))
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

    @property
    def pending(self) -> bool:
        """True while the group holds rollouts that were not awaited to the end."""
        return self._pending is not None

    def __await__(self) -> Generator[Any, None, TrajectoryGroup]:
        """Await the rollouts the group was built from (once, however often it is awaited);
        a finished group is returned as it is."""
        return self._resolve().__await__()

    async def _resolve(self) -> TrajectoryGroup:
        if self._pending is None:
            return self
        if self._resolution is None:
            self._resolution = asyncio.ensure_future(self._pending)
        done = await asyncio.shield(self._resolution)
        self.trajectories = done.trajectories
        self.exceptions = done.exceptions
        self._pending = None
        return self

    def __iter__(self) -> Iterator[Trajectory]:  # type: ignore[override]
        return iter(self.trajectories)

    def __len__(self) -> int:
        return len(self.trajectories)


def trajectory_group(
    trajectories: Iterable[Trajectory | BaseException | Awaitable[Trajectory]],
    *,
    exceptions: Iterable[BaseException | CapturedException | dict[str, Any]] = (),
    metadata: dict[str, MetadataValue] | None = None,
    metrics: dict[str, MetricValue] | None = None,
    logs: list[str] | None = None,
    return_exceptions: bool = True,
) -> Coroutine[Any, Any, TrajectoryGroup]:
    """Await rollouts concurrently and return them as one group, in input order.

    Items may be rollout awaitables, finished trajectories and exceptions; one awaitable
    object listed twice is awaited once. A rollout that raises an `Exception` becomes an
    exception entry (a `BaseException` such as cancellation propagates). ART's
    `trajectory_group` raises the first failure instead unless `return_exceptions=True`;
    arthex captures by default, so one failed rollout does not cost the group its other
    rollouts (`return_exceptions=False` gives ART's behaviour).

    The rollouts are taken from `trajectories` now, not when the group is awaited, so a
    generator over a loop variable (`trajectory_group(rollout(t) for _ in range(8))` inside
    `for t in tickets`) captures each `t` as it is at the call.
    """
    items = list(trajectories)
    given = list(exceptions)

    async def gather() -> TrajectoryGroup:
        tasks: dict[int, asyncio.Future[Any]] = {}
        for item in items:
            if not isinstance(item, Trajectory | BaseException) and id(item) not in tasks:
                if not inspect.isawaitable(item):
                    raise TypeError(
                        f"trajectory_group takes rollout awaitables, Trajectory objects and "
                        f"exceptions, got {type(item).__name__}"
                    )
                tasks[id(item)] = asyncio.ensure_future(item)
        try:
            if tasks:
                when = asyncio.ALL_COMPLETED if return_exceptions else asyncio.FIRST_EXCEPTION
                await asyncio.wait(tasks.values(), return_when=when)
            if not return_exceptions:
                # the first failure in input order (asking each settled task marks its error
                # as retrieved, so none is reported as "never retrieved" later)
                failures = [
                    error
                    for task in tasks.values()
                    if task.done() and not task.cancelled()
                    for error in [task.exception()]
                    if error is not None
                ]
                if failures:
                    raise failures[0]
            results: list[Trajectory | BaseException] = []
            for item in items:
                result = _outcome(tasks[id(item)]) if id(item) in tasks else item
                if isinstance(result, BaseException) and not isinstance(result, Exception):
                    raise result
                if not isinstance(result, Trajectory | BaseException):
                    raise TypeError(
                        f"a rollout returned {type(result).__name__}, expected a Trajectory"
                    )
                results.append(result)
        finally:
            for task in tasks.values():
                task.cancel()
        return TrajectoryGroup(
            results, exceptions=given, metadata=metadata, metrics=metrics, logs=logs
        )

    return gather()


def _outcome(task: asyncio.Future[Any]) -> Any:
    """A settled task's result or exception (cancelled: the CancelledError)."""
    if task.cancelled():
        return asyncio.CancelledError()
    error = task.exception()
    return error if error is not None else task.result()


def count_rollouts(groups: Sequence[TrajectoryGroup]) -> tuple[int, int]:
    """(successful trajectories, captured exceptions) over all groups."""
    return sum(len(g.trajectories) for g in groups), sum(len(g.exceptions) for g in groups)
