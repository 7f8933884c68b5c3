"""What one `train` call records: the training row of the update, and the batch it logged.

Kept apart from the use cases (model.py) because both are plain values and rules: how the
backend's per-gradient-step samples become one row, and how a retried call recognises the
batch a failed attempt already wrote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from .metrics import (
    STEP_NUM_GROUPS_TRAINABLE,
    ZERO_VARIANCE_TOLERANCE,
    MetricsRow,
    aggregate_training_metrics,
)
from .trajectories import TrajectoryGroup

GRADIENT_STEPS_KEY = "data/step_num_gradient_steps"  # on every training row, never null
TRAINER_SECONDS_KEY = "time/step_backend_train_s"  # ART's name: wall time of the backend's train
# On a row of its own at step N: the train-split rows at N above it in the ledger were logged by
# an update that never reached its checkpoint (it failed, or its process died, before step N+1
# was saved); the update that did train at N logged its batch after this row. The value is how
# many rows it retires, for a person reading the file; ART's readers see one more numeric row.
SUPERSEDED_KEY = "data/superseded_train_rows"
# On the batch row `train` logs at N (1.0): only such rows are ever retired, never a train-split
# row another writer logged (an evaluator, or ART's `backend.train` + `log` after the update).
UPDATE_BATCH_KEY = "data/update_batch"
# Counts of the batch the model itself records at step N (the train-split row); a backend's
# own copy would record the same fact again at N+1.
_BATCH_COUNT_KEYS = frozenset({STEP_NUM_GROUPS_TRAINABLE})


def gradient_steps(samples: Sequence[Mapping[str, float]]) -> float:
    """How many optimizer steps the update took: what the backend says (ART's
    `data/step_num_gradient_steps`, the same on every sample; a no-op update says 0), else one
    per sample it yielded."""
    said = [sample[GRADIENT_STEPS_KEY] for sample in samples if GRADIENT_STEPS_KEY in sample]
    return float(said[-1]) if said else float(len(samples))


def training_values(
    samples: Sequence[Mapping[str, float]], extra: Mapping[str, float | None]
) -> dict[str, float | None]:
    """The training row's metrics: the backend's samples averaged per key, `extra`, and the
    gradient-step count."""
    values: dict[str, float | None] = {
        key: value
        for key, value in aggregate_training_metrics(samples).items()
        if key not in _BATCH_COUNT_KEYS
    }
    values.update(extra)
    values[GRADIENT_STEPS_KEY] = gradient_steps(samples)
    return values


@attrs.define
class IdleSteps:
    """Updates that took no gradient step, said once per run of them: the first one of a run
    is logged with why; the ones after it are quiet until an update trains again."""

    idle: bool = False
    # why the last idle update trained nothing: the diagnostics' cause of the same fact
    cause: str = ""

    def after(
        self, step: int, new_step: int, taken: float, groups: Sequence[TrajectoryGroup]
    ) -> str | None:
        """The line to log for the update `step -> new_step` that took `taken` gradient steps
        on `groups` (what it trained on), or None."""
        if taken > 0:
            self.idle = False
            return None
        if self.idle:
            return None
        self.idle = True
        sized = [g for g in groups if len(g.trajectories) >= 2]
        tied = [
            g
            for g in sized
            if all(
                abs(t.reward - g.trajectories[0].reward) <= ZERO_VARIANCE_TOLERANCE
                for t in g.trajectories
            )
        ]
        if sized and len(tied) == len(sized):
            self.cause = "equal_rewards"
            why = (
                f"the rewards of each of its {len(sized)} groups were all equal, so every "
                "advantage was 0"
            )
        else:
            self.cause = "untrainable"
            why = "its batch had no trainable token"
        return (
            f"step {step} -> {new_step} trained nothing: {why}; the step advanced, the weights "
            "did not (the next updates like it are not reported until one trains)"
        )


@attrs.define
class PendingBatch:
    """The train-split batch of a `train` call whose update has not been recorded yet, and
    which of its writes are done: a retried `train` with the same groups at the same step
    writes neither its part nor its row again."""

    step: int
    groups: list[TrajectoryGroup]
    part_written: bool = False
    row: MetricsRow | None = None

    def retried_by(self, step: int, groups: Sequence[TrajectoryGroup]) -> bool:
        return (
            step == self.step
            and len(groups) == len(self.groups)
            and all(new is old or new == old for new, old in zip(groups, self.groups))
        )


def is_batch_row(row: MetricsRow) -> bool:
    """The row of a batch `train` logged at the step it trains from (UPDATE_BATCH_KEY)."""
    return row.values.get(UPDATE_BATCH_KEY) is not None


def supersedes(row: MetricsRow) -> bool:
    """Whether `row` retires the batch rows logged at its step above it."""
    return row.values.get(SUPERSEDED_KEY) is not None


def superseding_row(step: int, count: int) -> MetricsRow:
    return MetricsRow(step=step, values={SUPERSEDED_KEY: float(count)})


def trained_rows(rows: Sequence[MetricsRow]) -> list[MetricsRow]:
    """`rows` (in ledger order) without the batch rows a later marker at their step retired:
    what readers show and average, so a step never counts an update that did not train."""
    retired: set[int] = set()
    kept: list[MetricsRow] = []
    for row in reversed(rows):  # a marker retires only the rows above it
        if supersedes(row):
            retired.add(row.step)
        elif row.step in retired and is_batch_row(row):
            continue
        kept.append(row)
    kept.reverse()
    return kept
