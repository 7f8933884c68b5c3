"""What every adapter shares: taking any environment (`as_environment`), feeding one to the
PipelineTrainer (`rollout_fn`), the error of an episode that failed, and the metadata rule."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..core.environments import Environment
from ..core.errors import ArthexError, InvalidInputError
from ..core.pipeline.rollouts import RolloutFn, make_group_rollout_fn
from ..core.trainable import TrainableModel
from ..core.trajectories import MetadataValue, Trajectory


class EpisodeError(ArthexError, RuntimeError):
    """An environment's episode failed (its program, a model call or its scoring raised).

    Raised by `rollout`, so `gather_trajectory_groups`, the PipelineTrainer and evaluations
    count it as a failed rollout (an exception entry of its group), the way ART does."""


def is_verifiers_environment(value: object) -> bool:
    """Whether `value` is a verifiers environment (`verifiers.v1.Env`), without importing
    verifiers: one of its classes is verifiers' `Env`."""
    return any(
        klass.__name__ == "Env" and klass.__module__.split(".")[0] == "verifiers"
        for klass in type(value).__mro__
    )


def as_environment(value: object) -> Environment[Any]:
    """An arthex `Environment` from what a user hands over: an `Environment` (anything with
    `scenarios(split)` and `async rollout(model, scenario)`) is returned as is; a verifiers
    environment is wrapped with `from_verifiers`; anything else is refused."""
    if isinstance(value, Environment):
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


def metadata_value(value: object) -> MetadataValue:
    """A value for `Trajectory.metadata`: strings, numbers, booleans and None as they are,
    anything else as its JSON text (its `repr` when it has none)."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    try:
        return json.dumps(value, sort_keys=True, default=_jsonable)
    except (TypeError, ValueError):
        return repr(value)


def _jsonable(value: object) -> object:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(type(value).__name__)
