"""TrajectoryStore: where logged trajectory groups and the model's card live, and the facets
that keep the rest of a run directory's data next to them: RunStateStore (the small JSON
object a training script keeps across restarts, ART's `state.json`) and PipelineStateStore
(a pipeline's durable record of its scenario stream)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..core.identity import ModelSpec, RunRef
from ..core.pipeline_record import PipelineRecord
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


# --- run-directory data next to the trajectories: the script's state, the pipeline record ---

StateChange = Callable[[dict[str, Any] | None], dict[str, Any]]


class RunStateStore(Protocol):
    def read(self, run: RunRef) -> dict[str, Any] | None:
        """The run's state, or None when none was ever written."""
        ...

    def update(self, run: RunRef, change: StateChange) -> dict[str, Any]:
        """Replace the state with `change(current)` as one atomic step: two processes updating
        one run at once never lose each other's change, and a reader never sees half a
        state. Returns what was stored."""
        ...


class PipelineStateStore(Protocol):
    async def load(self, run: RunRef) -> PipelineRecord | None:
        """The record last saved for `run`, or None when there is none."""
        ...

    async def save(self, run: RunRef, record: PipelineRecord) -> None:
        """Replace the record atomically and durably: after a crash at any moment, `load`
        returns the old record or the new one, never a mix, and never loses a saved one."""
        ...
