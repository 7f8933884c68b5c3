"""In-memory stand-ins for the ports, verified by the same contract kits as the real adapters."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from ...core.errors import CorruptDataError, InvalidInputError
from ...core.identity import ModelSpec, RunRef, validate_name
from ...core.trajectories import TrajectoryGroup

if TYPE_CHECKING:
    from ...ports.trajectory_store import TrajectoryStore


class InMemoryTrajectoryStore:
    """A TrajectoryStore in a dict. Every group goes through JSON on the way in and out, so
    what the caller gets back is a copy, unserializable input is refused as the real store
    refuses it, and a test passing here says what it would say against parquet."""

    def __init__(self) -> None:
        self._parts: dict[tuple[RunRef, str, int], list[list[str]]] = {}
        self.model_specs: dict[RunRef, dict[str, Any]] = {}

    async def write(
        self, run: RunRef, split: str, step: int, groups: Sequence[TrajectoryGroup]
    ) -> str:
        _check_location(split, step)
        given: object = groups
        if isinstance(given, TrajectoryGroup) or not isinstance(given, Sequence):
            raise InvalidInputError(
                f"groups must be a list of TrajectoryGroup, got {type(given).__name__}"
            )
        part = [_dump(g, group) for g, group in enumerate(given)]
        parts = self._parts.setdefault((run, split, step), [])
        parts.append(part)
        return f"memory://{run.project}/models/{run.name}/trajectories/{split}/{step:04d}"

    async def read(self, run: RunRef, split: str, step: int) -> list[TrajectoryGroup]:
        _check_location(split, step)
        return [
            _load(dumped) for part in self._parts.get((run, split, step), []) for dumped in part
        ]

    async def steps(self, run: RunRef, split: str) -> list[int]:
        validate_name(split, "split")
        return sorted(s for (r, sp, s) in self._parts if r == run and sp == split)

    async def write_model_spec(self, spec: ModelSpec) -> None:
        try:
            text = json.dumps(spec.to_json(), allow_nan=False)
        except (TypeError, ValueError) as error:
            raise InvalidInputError(
                f"the config of model {spec.run} cannot be written as JSON ({error}); "
                "use plain strings, numbers, booleans, lists and dicts"
            ) from error
        self.model_specs[spec.run] = json.loads(text)

    async def read_model_spec(self, run: RunRef) -> dict[str, Any] | None:
        spec = self.model_specs.get(run)
        return None if spec is None else json.loads(json.dumps(spec))


def _check_location(split: str, step: int) -> None:
    validate_name(split, "split")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidInputError(f"step must be an integer >= 0, got {step!r}")


def _dump(index: int, group: object) -> str:
    if not isinstance(group, TrajectoryGroup):
        raise InvalidInputError(
            f"groups[{index}] must be a TrajectoryGroup, got {type(group).__name__}"
        )
    try:
        # mode="json" keeps NaN and infinities as floats; json writes them as NaN/Infinity.
        text = json.dumps(group.model_dump(mode="json", warnings="error"), ensure_ascii=False)
        text.encode("utf-8")  # a lone surrogate cannot be stored as UTF-8 text, on disk or here
    except (PydanticSerializationError, TypeError, ValueError) as error:
        raise InvalidInputError(f"groups[{index}] cannot be stored as JSON: {error}") from error
    return text


def _load(text: str) -> TrajectoryGroup:
    try:
        return TrajectoryGroup.model_validate(json.loads(text))
    except ValidationError as error:  # pragma: no cover - only if the model changed under us
        raise CorruptDataError(f"a stored group no longer validates: {error}") from error


if TYPE_CHECKING:
    _fits: type[TrajectoryStore] = InMemoryTrajectoryStore
