"""The ways to open a capture scope: `capture()` (async or sync `with`, or a decorator),
`capture_trajectory(coro)` and `capture_trajectory_group(coros)`.

None of them asks anything of the agent: it keeps calling its OpenAI client as before.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from types import TracebackType
from typing import Any, overload

from ..errors import InvalidInputError
from ..trajectories import (
    CapturedException,
    MetadataValue,
    MetricValue,
    Trajectory,
    TrajectoryGroup,
)
from .endpoints import EndpointFilter, Endpoints
from .scope import Scope, close_scope, no_capture, open_scope

Reward = Callable[[Any], float | Awaitable[float]]


class capture:
    """Record every chat-completion call made inside into one trajectory.

    ```python
    async with arthex.capture() as trajectory:
        answer = await agent(question)          # the agent's own OpenAI client, unchanged
    trajectory.reward = score(answer)
    ```

    `endpoints`: None watches every endpoint a model registered in this process; `"any"`
    watches any chat-completions URL; a list of base URLs watches those only. `trajectory`:
    record into this (fresh, capture-only) trajectory instead of a new one.

    Works as `with` for synchronous agents, and as a decorator: the decorated function returns
    its captured Trajectory instead of its own result (set the reward inside through
    `arthex.current_trajectory()`). If the body raises, the trajectory keeps the calls that
    completed, is flagged incomplete (`trajectory.incomplete`), and the error propagates.
    """

    def __init__(
        self, *, endpoints: Endpoints = None, trajectory: Trajectory | None = None
    ) -> None:
        self._endpoints = endpoints
        self._filter = EndpointFilter(endpoints)  # bad endpoints fail here, not at entry
        self._trajectory = trajectory
        self._open: tuple[Scope, Any] | None = None
        self._used = False

    def _enter(self) -> Trajectory:
        if self._used:
            raise InvalidInputError("a capture() is entered once; make a new one for each scope")
        self._used = True
        self._open = open_scope(self._trajectory, self._filter)
        return self._open[0].trajectory

    def _exit(self, error: BaseException | None) -> None:
        assert self._open is not None
        scope, token = self._open
        self._open = None
        close_scope(scope, token, error)

    async def __aenter__(self) -> Trajectory:
        return self._enter()

    async def __aexit__(self, *exc_info: Any) -> None:
        self.__exit__(*exc_info)

    def __enter__(self) -> Trajectory:
        return self._enter()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._exit(error)

    @overload
    def __call__(
        self, function: Callable[..., Coroutine[Any, Any, Any]]
    ) -> Callable[..., Coroutine[Any, Any, Trajectory]]: ...

    @overload
    def __call__(self, function: Callable[..., Any]) -> Callable[..., Trajectory]: ...

    def __call__(self, function: Callable[..., Any]) -> Callable[..., Any]:
        if self._trajectory is not None:
            raise InvalidInputError(
                "a capture() decorator makes a new trajectory per call; do not pass trajectory="
            )
        endpoints = self._endpoints
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def run_async(*args: Any, **kwargs: Any) -> Trajectory:
                async with capture(endpoints=endpoints) as trajectory:
                    await function(*args, **kwargs)
                return trajectory

            return run_async

        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Trajectory:
            with capture(endpoints=endpoints) as trajectory:
                function(*args, **kwargs)
            return trajectory

        return run


def _check_coroutines(values: list[Any], where: str) -> None:
    # A Task or Future already runs in the context it was created in, outside the scope: its
    # calls would silently go unrecorded. A raw coroutine runs inside.
    for value in values:
        if not inspect.iscoroutine(value):
            for other in values:
                if inspect.iscoroutine(other):
                    other.close()  # none will run: no "never awaited" warnings
            raise InvalidInputError(
                f"{where} takes un-awaited coroutines (agent(question)), got "
                f"{type(value).__name__}; a Task or Future already runs outside the scope"
            )


async def _apply_reward(trajectory: Trajectory, reward: Reward | None, result: Any) -> None:
    if reward is None:
        return
    value = reward(result)
    if inspect.isawaitable(value):
        value = await value
    trajectory.reward = float(value)


async def _captured(
    coroutine: Coroutine[Any, Any, Any], reward: Reward | None, endpoints: Endpoints
) -> tuple[Trajectory, Exception | None]:
    """Run one rollout in its own scope; the trajectory, and the Exception it (or its reward)
    raised if any. A rollout that returns a Trajectory of its own gives that one."""
    scope = capture(endpoints=endpoints)
    try:
        trajectory = scope._enter()
    except BaseException:
        coroutine.close()  # never started: no "was never awaited" warning
        raise
    try:
        result = await coroutine
    except Exception as error:
        scope._exit(error)
        return trajectory, error
    except BaseException as error:
        scope._exit(error)
        raise
    scope._exit(None)
    if isinstance(result, Trajectory):
        return result, None
    try:
        # after the scope closed: a judge the reward calls is not recorded
        await _apply_reward(trajectory, reward, result)
    except Exception as error:
        return trajectory, error
    return trajectory, None


async def capture_trajectory(
    coroutine: Coroutine[Any, Any, Any],
    *,
    reward: Reward | None = None,
    endpoints: Endpoints = None,
) -> Trajectory:
    """Run `coroutine` (an agent call) in a scope and return what it recorded.

    `reward(result)` (a number or an awaitable of one) sets the reward from the coroutine's
    return value; it runs after the scope closed, so a judge it calls is not recorded. When the
    coroutine raises, the error propagates (use `capture_trajectory_group` to keep crashed
    rollouts)."""
    _check_coroutines([coroutine], "capture_trajectory")
    trajectory, error = await _captured(coroutine, reward, endpoints)
    if error is not None:
        raise error
    return trajectory


async def capture_calls(coroutine: Coroutine[Any, Any, Any]) -> Trajectory:
    """The calls `coroutine` makes, as a trajectory (ART's `art.trajectory(coroutine)`): run it
    in a scope watching every endpoint (as ART's records any chat, responses or messages call,
    whatever the host) and return what the scope recorded, whatever the coroutine returns (a
    Trajectory it returns is not the result). Its reward is left unset; an error it raises
    propagates."""
    _check_coroutines([coroutine], "capture_calls")

    async def result_dropped() -> None:
        await coroutine

    return await capture_trajectory(result_dropped(), endpoints="any")


def capture_trajectory_group(
    rollouts: Iterable[Coroutine[Any, Any, Any]],
    *,
    reward: Reward | None = None,
    endpoints: Endpoints = None,
    metadata: dict[str, MetadataValue] | None = None,
    metrics: dict[str, MetricValue] | None = None,
    logs: list[str] | None = None,
) -> Coroutine[Any, Any, TrajectoryGroup]:
    """Run each rollout concurrently in its own scope: one group, trajectories in input order.

    A rollout that raises an `Exception` becomes an exception entry that keeps the calls it
    completed (`CapturedException.trajectory`, flagged incomplete; stored with the group and
    not trained unless `TrainConfig(train_incomplete_trajectories=True)`). Any other
    BaseException (cancellation) cancels the rest and propagates.

    The rollouts are taken from `rollouts` now, not when the group is awaited, so a generator
    over a loop variable captures each value as it is at the call."""
    coroutines = list(rollouts)
    _check_coroutines(coroutines, "capture_trajectory_group")
    return _run_group(coroutines, reward, endpoints, metadata, metrics, logs)


async def _run_group(
    coroutines: list[Coroutine[Any, Any, Any]],
    reward: Reward | None,
    endpoints: Endpoints,
    metadata: dict[str, MetadataValue] | None,
    metrics: dict[str, MetricValue] | None,
    logs: list[str] | None,
) -> TrajectoryGroup:
    with no_capture():  # each rollout's own scope is its innermost; nothing leaks outward
        tasks = [
            asyncio.ensure_future(_captured(coroutine, reward, endpoints))
            for coroutine in coroutines
        ]
    try:
        outcomes = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    trajectories: list[Trajectory] = []
    exceptions: list[CapturedException] = []
    for trajectory, error in outcomes:
        if error is None:
            trajectories.append(trajectory)
        else:
            exceptions.append(CapturedException.from_exception(error, trajectory=trajectory))
    return TrajectoryGroup(
        trajectories, exceptions=exceptions, metadata=metadata, metrics=metrics, logs=logs
    )
