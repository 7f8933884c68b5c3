"""MetricsReporter (where rows go) and MetricsHistory (the ledger the policies read)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ..core.identity import RunRef
from ..core.metrics import MetricsRow
from ..core.trajectories import TrajectoryGroup


class MetricsReporter(Protocol):
    async def report(self, run: RunRef, row: MetricsRow) -> None:
        """Record one row. A mirror may be best-effort; the history may not."""
        ...

    async def close(self) -> None:
        """Flush and release; calling it twice is harmless."""
        ...


class MetricsHistory(MetricsReporter, Protocol):
    """The ledger the policies read. Other processes (an evaluator, a restarted trainer) may
    append to the same run's ledger; `rows_since` lets a reader catch up on what anyone
    appended since its last look, at a cost that does not grow with the ledger."""

    async def rows(self, run: RunRef) -> Sequence[MetricsRow]:
        """Every row reported for `run`, in the order they were appended."""
        ...

    async def rows_since(self, run: RunRef, cursor: int) -> tuple[list[MetricsRow], int]:
        """The rows appended after the opaque `cursor` (0: from the start) by anyone, and the
        cursor to pass next time. A row still being written is returned by a later call, never
        twice. When the ledger was cut below `cursor` or replaced, raise CorruptDataError: the
        caller reads it again from 0."""
        ...


@runtime_checkable
class Startable(Protocol):
    """A reporter with a costly or fallible start (a tracker's run). The model starts it
    before the first write of its first `log` or `train`, so a reporter that cannot work fails
    the call while nothing is written; once started, it degrades quietly instead of raising."""

    async def start(self, run: RunRef) -> None: ...


@runtime_checkable
class ConfigRecorder(Protocol):
    """A reporter that records the run's configuration (e.g. a tracker's run config)."""

    def update_config(self, run: RunRef, config: Mapping[str, Any]) -> None: ...


@runtime_checkable
class SampleRecorder(Protocol):
    """A reporter that shows a few sample trajectories per logged batch."""

    async def report_samples(
        self, run: RunRef, split: str, step: int, groups: Sequence[TrajectoryGroup]
    ) -> None: ...
