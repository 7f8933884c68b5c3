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
        """Add `groups` to (split, step) and return where they went. A second write at the
        same (split, step) adds its groups after the earlier ones; nothing is ever lost, also
        when writers race. Atomic: a reader sees all of a write's groups or none of them."""
        ...

    async def read(self, run: RunRef, split: str, step: int) -> list[TrajectoryGroup]:
        """Every group logged at (split, step), in the order they were written."""
        ...

    async def steps(self, run: RunRef, split: str) -> list[int]:
        """The steps at which `split` has been written, ascending."""
        ...

    async def write_model_spec(self, spec: ModelSpec) -> None:
        """Record the model's spec (`model.json` on disk), replacing any earlier one."""
        ...

    async def read_model_spec(self, run: RunRef) -> dict[str, Any] | None:
        """The recorded spec as its JSON object (`ModelSpec.to_json()`), None if none."""
        ...
