"""Two helpers ART scripts call around their rollouts: the mean reward of a few rollouts of
one model (`benchmark_rollout`), and silencing LiteLLM's known pydantic serializer warnings
(`suppress_litellm_serialization_warnings`) in scripts that use LiteLLM themselves."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Coroutine
from typing import Any

from ..core.errors import InvalidInputError
from ..core.trajectories import Trajectory

Rollout = Callable[[str, int, bool], Coroutine[Any, Any, Trajectory]]


async def benchmark_rollout(model: str, num_rollouts: int, rollout: Rollout) -> float:
    """Run `rollout(model, i, False)` for i in 0..num_rollouts-1 concurrently, print and return
    their mean reward. A rollout that raises fails the call with its own error, as in ART."""
    if isinstance(num_rollouts, bool) or not isinstance(num_rollouts, int) or num_rollouts < 1:
        raise InvalidInputError(f"num_rollouts must be an integer >= 1, not {num_rollouts!r}")
    done = await asyncio.gather(*(rollout(model, i, False) for i in range(num_rollouts)))
    for trajectory in done:
        if not isinstance(trajectory, Trajectory):
            raise InvalidInputError(
                f"a rollout returned {type(trajectory).__name__}, not a Trajectory"
            )
    rewards = [trajectory.reward for trajectory in done]
    average = sum(rewards) / len(rewards)
    print(f"Average reward for {model}: {average}")
    return average


def suppress_litellm_serialization_warnings() -> None:
    """Ignore, from here on, the `PydanticSerializationUnexpectedValue` UserWarnings that
    pydantic raises while LiteLLM serializes its own response types (a known LiteLLM issue);
    every other warning is still shown."""
    warnings.filterwarnings(
        "ignore",
        category=UserWarning,
        module=r"pydantic\.main",
        message=r"Pydantic serializer warnings:\s+PydanticSerializationUnexpectedValue",
    )
