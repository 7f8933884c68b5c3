"""What the adapters share: the error of an episode that failed, recognizing a verifiers
environment without importing verifiers, and the metadata rule."""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..core.errors import ArthexError
from ..core.trajectories import MetadataValue


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
