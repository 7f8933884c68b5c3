"""A run's history as the policies see it.

The rows come from `history.jsonl` through the ledger's own reader (its lock, its handling of a
torn last line and of ART's `Infinity`), and per-step means and the best step come from the
very objects `model.delete_checkpoints` and the learning-rate policy decide with
(`HistoryIndex`, `BestStep`): a number the CLI shows is the number the run acts on.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import attrs

from ...adapters.jsonl_history import read_rows
from ...adapters.layout import HISTORY, run_label
from ...core.history_index import HistoryIndex
from ...core.metrics import STEP_NUM_GROUPS_TRAINABLE, MetricsRow
from ...core.retention import BestStep, Direction
from ...core.training_row import GRADIENT_STEPS_KEY
from .common import UsageError

# why an update took no gradient step: what its batch (the one logged a step before) held;
# `{batch}` is that batch's step
ALL_EQUAL = "each group of step {batch}'s batch had equal rewards"
NO_TOKENS = "step {batch}'s batch had no trainable token"


@attrs.frozen
class Ledger:
    rows: tuple[MetricsRow, ...]
    index: HistoryIndex = attrs.field(eq=False)

    @classmethod
    def of(cls, model_dir: Path) -> Ledger:
        rows = read_rows(model_dir / HISTORY)
        return cls(tuple(rows), HistoryIndex(rows))

    @classmethod
    def required(cls, model_dir: Path) -> Ledger:
        """The ledger, or UsageError when the model has no rows yet."""
        ledger = cls.of(model_dir)
        if not ledger.rows:
            raise UsageError(
                f"model {run_label(model_dir)} has no history yet ({model_dir / HISTORY})"
            )
        return ledger

    def metric_keys(self) -> list[str]:
        """Every metric key, in order of first appearance."""
        seen: dict[str, None] = {}
        for row in self.rows:
            seen.update(dict.fromkeys(row.values))
        return list(seen)

    def step_means(self, key: str) -> dict[int, float]:
        """Per-step mean of `key` over the rows that logged it, by ascending step."""
        return dict(sorted(self.index.step_means(key).items()))

    def best_step(self, metric: str, direction: Direction) -> int | None:
        """The best step by the per-step mean of `metric` (ties go to the later step)."""
        tracker = BestStep(direction)
        self.index.subscribe(metric, tracker)
        return tracker.step

    def nothing_trained(self) -> dict[int, str]:
        """Steps made by an update that took no gradient step, and why: in the batch logged at
        the step before, no group's rewards differed, or nothing else was there to train on."""
        counted = self.index.step_means(STEP_NUM_GROUPS_TRAINABLE)
        return {
            step: ALL_EQUAL if counted.get(step - 1) == 0 else NO_TOKENS
            for step, taken in self.step_means(GRADIENT_STEPS_KEY).items()
            if taken == 0
        }

    def last_step(self) -> int | None:
        return max((row.step for row in self.rows), default=None)

    def newest_time(self) -> datetime | None:
        return max((row.recorded_at for row in self.rows), default=None)
