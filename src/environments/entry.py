"""Taking any environment (`as_environment`), and feeding one to the PipelineTrainer
(`rollout_fn`)."""

from __future__ import annotations

from typing import Any

from ..core.environments import Environment
from ..core.errors import InvalidInputError
from ..core.pipeline.rollouts import RolloutFn, make_group_rollout_fn
from ..core.trainable import TrainableModel
from ..core.trajectories import Trajectory
from .shared import is_verifiers_environment


def as_environment(value: object) -> Environment[Any]:
    """An arthex `Environment` from what a user hands over: an `Environment` (anything with
    `scenarios(split)` and `async rollout(model, scenario)`) is returned as is; a verifiers
    environment is wrapped with `from_verifiers`; anything else is refused."""
    if isinstance(value, Environment) and not isinstance(value, type):  # not a class
        return value
    if is_verifiers_environment(value):
        from .verifiers_adapter import from_verifiers

        return from_verifiers(value)
    kind = type(value)
    raise InvalidInputError(
        f"expected an arthex Environment (scenarios(split) and async rollout(model, scenario)) "
        f"or a verifiers environment, got {kind.__module__}.{kind.__qualname__}"
    )


def rollout_fn(environment: object, n: int = 4) -> RolloutFn[TrainableModel, Any, Any]:
    """A PipelineTrainer `rollout_fn`: `n` rollouts of one scenario run concurrently as one
    group; a rollout that raises becomes an exception entry of its group.

    ```python
    trainer = arthex.PipelineTrainer(model=model, backend=backend,
        rollout_fn=rollout_fn(environment, n=8), scenarios=environment.scenarios("train"), ...)
    ```"""
    env = as_environment(environment)

    async def single(model: TrainableModel, scenario: Any, config: Any) -> Trajectory:
        return await env.rollout(model, scenario)

    return make_group_rollout_fn(single, n)
