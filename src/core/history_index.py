"""Per-step means of every metric, kept up to date row by row.

The policies (learning rate, retention) read per-step means. Re-reading history.jsonl for each
decision costs O(history). This index instead remembers where in the ledger it stopped reading
(`cursor`) and, before each decision, takes in only the rows anyone appended since: the model's
own rows and an evaluator's alike. A decision then costs O(new rows + steps of one metric).

A superseding marker (training_row.SUPERSEDED_KEY) takes the batch rows it retires back out of
every mean and total, as if they had never been read: the batch rows of the newest steps are
kept for that (an update resumed at N retires rows at N, the newest step with rows).
"""

from __future__ import annotations

from collections.abc import Iterable

from .metrics import MetricsRow
from .training_row import is_batch_row, supersedes

_BATCH_STEPS_KEPT = 2  # steps whose batch rows stay retractable


class HistoryIndex:
    def __init__(self, rows: Iterable[MetricsRow] = ()) -> None:
        # key -> step -> [sum, count]
        self._sums: dict[str, dict[int, list[float]]] = {}
        self._listeners: dict[str, list[StepMeanListener]] = {}
        self._totals: dict[str, float] = {}
        self.cursor = 0  # where the ledger's next unread row starts (see MetricsHistory)
        self.last_step: int | None = None  # the highest step of any row read
        self._batches: dict[int, list[MetricsRow]] = {}  # retractable batch rows per step
        for row in rows:
            self.observe(row)

    def catch_up(self, rows: Iterable[MetricsRow], cursor: int) -> None:
        """Take in the rows read from the ledger since `self.cursor`; `cursor` is where the
        next read starts."""
        for row in rows:
            self.observe(row)
        self.cursor = cursor

    def observe(self, row: MetricsRow) -> None:
        if self.last_step is None or row.step > self.last_step:
            self.last_step = row.step
        if supersedes(row):
            for retired in self._batches.pop(row.step, []):
                self._retract(retired)
        elif is_batch_row(row):
            self._batches.setdefault(row.step, []).append(row)
            for stale in sorted(self._batches)[:-_BATCH_STEPS_KEPT]:
                del self._batches[stale]
        for key, value in row.values.items():
            if value is None:
                continue
            self._totals[key] = self._totals.get(key, 0.0) + value
            per_step = self._sums.setdefault(key, {})
            cell = per_step.get(row.step)
            old = None if cell is None else cell[0] / cell[1]
            if cell is None:
                per_step[row.step] = [value, 1.0]
            else:
                cell[0] += value
                cell[1] += 1.0
            cell = per_step[row.step]
            for listener in self._listeners.get(key, ()):
                listener.step_mean_changed(row.step, old, cell[0] / cell[1])

    def _retract(self, row: MetricsRow) -> None:
        for key, value in row.values.items():
            if value is None:
                continue
            self._totals[key] -= value
            per_step = self._sums[key]
            cell = per_step[row.step]
            old = cell[0] / cell[1]
            cell[0] -= value
            cell[1] -= 1.0
            listeners = self._listeners.get(key, ())
            if cell[1] <= 0:
                del per_step[row.step]
                if not per_step:
                    del self._sums[key]
                for listener in listeners:
                    listener.step_mean_removed(row.step, old)
            else:
                for listener in listeners:
                    listener.step_mean_changed(row.step, old, cell[0] / cell[1])

    def untrained_batches(self, step: int) -> int:
        """How many batch rows at `step` no marker has retired yet."""
        return len(self._batches.get(step, ()))

    def total(self, key: str) -> float:
        """The sum of `key` over every row that has it (0.0 when none does)."""
        return self._totals.get(key, 0.0)

    def has(self, key: str) -> bool:
        return key in self._sums

    def has_value(self, key: str, step: int) -> bool:
        """Whether some row at `step` has a non-null `key`."""
        return step in self._sums.get(key, {})

    def step_means(self, key: str) -> dict[int, float]:
        """Mean of `key` per step over every row that has it (nulls excluded)."""
        return {step: total / count for step, (total, count) in self._sums.get(key, {}).items()}

    def subscribe(self, key: str, listener: StepMeanListener) -> None:
        """Tell `listener` about every current and future change of a per-step mean of `key`."""
        self._listeners.setdefault(key, []).append(listener)
        for step, (total, count) in sorted(self._sums.get(key, {}).items()):
            listener.step_mean_changed(step, None, total / count)


class StepMeanListener:
    def step_mean_changed(self, step: int, old: float | None, new: float) -> None:
        raise NotImplementedError

    def step_mean_removed(self, step: int, old: float) -> None:
        """Every row of `step` that had the key was retired (see the module's docstring)."""
        raise NotImplementedError
