"""TrajectoryStore: where logged trajectory groups and the model's card live."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..core.identity import ModelSpec, RunRef
from ..core.trajectories import TrajectoryGroup


class TrajectoryStore(Protocol):
    async def write(
        self, run: RunRef, split: str, step: int, groups: Sequence[TrajectoryGroup]
    ) -> str:
        """Write one part for (split, step) and return where it went. A second write at the
        same (split, step) adds a part; nothing is ever overwritten. Atomic: a reader sees the
        whole part or none of it."""
        ...

    async def read(self, run: RunRef, split: str, step: int) -> list[TrajectoryGroup]:
        """Every group logged at (split, step), parts in the order they were written."""
        ...

    async def steps(self, run: RunRef, split: str) -> list[int]:
        """The steps that have at least one part for `split`, ascending."""
        ...

    async def write_model_spec(self, spec: ModelSpec) -> None:
        """Record the model's spec (`model.json` on disk), replacing any earlier one."""
        ...

    async def read_model_spec(self, run: RunRef) -> dict[str, Any] | None:
        """The recorded spec as its JSON object (`ModelSpec.to_json()`), None if none."""
        ...
