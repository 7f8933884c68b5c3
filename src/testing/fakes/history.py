"""InMemoryHistory: a MetricsHistory in a dict, run against the same contract as JsonlHistory.

Rows are deep-copied in and out, so a caller that mutates a row's values after reporting it,
or a row it read back, cannot change the ledger: the same isolation a file gives.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...core.errors import InvalidInputError
from ...core.identity import RunRef
from ...core.metrics import MetricsRow

if TYPE_CHECKING:
    from ...ports.metrics_reporter import MetricsHistory


class InMemoryHistory:
    def __init__(self) -> None:
        self._rows: dict[RunRef, list[MetricsRow]] = {}
        self.closed = 0

    async def report(self, run: RunRef, row: MetricsRow) -> None:
        if not isinstance(row, MetricsRow):
            raise InvalidInputError(f"report takes a MetricsRow, got {type(row).__name__}")
        self._rows.setdefault(run, []).append(copy.deepcopy(row))

    async def rows(self, run: RunRef) -> Sequence[MetricsRow]:
        return copy.deepcopy(self._rows.get(run, []))

    async def rows_since(self, run: RunRef, offset: int) -> tuple[list[MetricsRow], int]:
        """Rows after the opaque cursor `offset` (0 = the start), and the next cursor; here the
        cursor is a row count, in JsonlHistory a byte offset."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInputError(
                f"offset must be a cursor >= 0 returned by rows_since, got {offset!r}"
            )
        rows = self._rows.get(run, [])
        if offset > len(rows):
            raise InvalidInputError(
                f"cursor {offset} is past the {len(rows)} rows of {run}; read again from 0"
            )
        return copy.deepcopy(rows[offset:]), len(rows)

    async def close(self) -> None:
        """Counts closes (tests check a caller closed it); the rows stay readable."""
        self.closed += 1


if TYPE_CHECKING:
    _fits: type[MetricsHistory] = InMemoryHistory
