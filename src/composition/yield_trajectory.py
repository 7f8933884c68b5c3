"""ART's `art.yield_trajectory`: a rollout hands its trajectory to whoever awaits it with
`capture_yielded_trajectory`, instead of returning it.

The hand-over is a context variable, so concurrent rollouts (asyncio tasks) never see each
other's trajectory. The awaited rollout also runs in an arthex capture scope, so its chat
completions to a watched endpoint are recorded as in `arthex.capture()`; they are added to
the yielded trajectory when it recorded none itself.
"""

from __future__ import annotations

import contextvars
from collections.abc import Coroutine
from types import TracebackType
from typing import Any

from ..core.trajectories import Trajectory
from .capture import capture

__all__ = [
    "YieldTrajectoryContext",
    "capture_yielded_trajectory",
    "yield_trajectory",
    "yield_trajectory_context_var",
]


class YieldTrajectoryContext:
    """Where `yield_trajectory` puts the trajectory while the context is entered."""

    def __init__(self) -> None:
        self.trajectory: Trajectory | None = None
        self._token: contextvars.Token[YieldTrajectoryContext] | None = None

    def __enter__(self) -> None:
        self._token = yield_trajectory_context_var.set(self)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._token is not None:
            yield_trajectory_context_var.reset(self._token)
            self._token = None


yield_trajectory_context_var: contextvars.ContextVar[YieldTrajectoryContext] = (
    # one shared default, as ART has: a yield outside any capture lands there
    contextvars.ContextVar("arthex_yield_trajectory", default=YieldTrajectoryContext())  # noqa: B039
)
"""The current context; outside `capture_yielded_trajectory` a module-wide default (ART's)."""


def yield_trajectory(trajectory: Trajectory) -> None:
    """Hand `trajectory` to the enclosing `capture_yielded_trajectory` (the last one wins)."""
    yield_trajectory_context_var.get().trajectory = trajectory


async def capture_yielded_trajectory(coroutine: Coroutine[Any, Any, Any]) -> Trajectory:
    """Await the rollout `coroutine` and return the trajectory it yielded; RuntimeError
    ("No trajectory yielded") when it yielded none."""
    recorded = Trajectory()
    with YieldTrajectoryContext():
        async with capture(trajectory=recorded):
            await coroutine
        trajectory = yield_trajectory_context_var.get().trajectory
    if trajectory is None:
        raise RuntimeError("No trajectory yielded")
    if not trajectory.exchanges.chat_completions and not trajectory.is_legacy():
        trajectory.exchanges.chat_completions.extend(recorded.exchanges.chat_completions)
    return trajectory
