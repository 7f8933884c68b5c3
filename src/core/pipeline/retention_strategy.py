"""A retention strategy for the PipelineTrainer: a function that, shown the checkpoints it may
delete, returns the steps of those to keep; every other one of them is deleted.

The checkpoints shown are the ones nothing needs (not the newest, not one a rollout or an
evaluation still samples from, not a KL reference), each with the history's values at its
step, so a strategy can rank them by an evaluation metric. `keep_recent_and_top` is the
usual one: the `recent` newest of them and the `top` best by `metric`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime

import attrs

from ..errors import InvalidInputError
from ..metrics import MetricsRow

__all__ = [
    "CHECKPOINT_CREATED_AT_METRIC",
    "CHECKPOINT_EVAL_COMPLETED_METRIC",
    "CHECKPOINT_SAVED_METRIC",
    "CheckpointInfo",
    "RetentionContext",
    "RetentionStrategy",
    "checkpoint_infos",
    "keep_recent_and_top",
]

CHECKPOINT_CREATED_AT_METRIC = "checkpoint/created_at_unix"
CHECKPOINT_EVAL_COMPLETED_METRIC = "checkpoint/eval_completed"
CHECKPOINT_SAVED_METRIC = "checkpoint/saved"
_EVAL_SPLITS = ("val/", "test/")


@attrs.frozen(kw_only=True)
class CheckpointInfo:
    """One checkpoint a strategy may delete: its step, where it is (`path`: the name the
    backend serves it under, `{run_name}@{step}`), when it was made, whether an evaluation ran
    at its step, and the history's values at that step."""

    step: int
    path: str
    created_at: datetime
    is_eval_step: bool = False
    metrics: Mapping[str, float] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class RetentionContext:
    """The step just trained, and the checkpoints the strategy decides on (oldest first)."""

    current_step: int
    checkpoints: Sequence[CheckpointInfo] = ()


RetentionStrategy = Callable[[RetentionContext], Iterable[int]]


def keep_recent_and_top(
    *, recent: int = 5, top: int = 2, metric: str = "reward/val"
) -> RetentionStrategy:
    """Keep the `recent` newest checkpoints shown and the `top` with the highest `metric` (the
    later step first on a tie); checkpoints without the metric are not ranked."""
    if recent < 0:
        raise InvalidInputError(f"recent must be >= 0, got {recent}")
    if top < 0:
        raise InvalidInputError(f"top must be >= 0, got {top}")

    def strategy(context: RetentionContext) -> set[int]:
        ordered = sorted(context.checkpoints, key=lambda c: c.step)
        keep = {c.step for c in ordered[len(ordered) - recent :]} if recent else set()
        ranked = sorted(
            (c for c in ordered if metric in c.metrics),
            key=lambda c: (c.metrics[metric], c.step),
            reverse=True,
        )
        return keep | {c.step for c in ranked[:top]}

    return strategy


def checkpoint_infos(
    steps: Iterable[int],
    rows: Sequence[MetricsRow],
    paths: Callable[[int], str],
    *,
    evaluated: Iterable[int] = (),
) -> list[CheckpointInfo]:
    """The checkpoints of `steps`, oldest first, with the values of the history rows at each
    step (a later row's value wins) and the time of the first one (or the created-at metric).
    A checkpoint is an evaluated one if `evaluated` lists its step (the pipeline record's
    finished evaluations) or its rows hold the eval-completed metric or eval values."""
    finished = set(evaluated)
    values: dict[int, dict[str, float]] = {}
    first_seen: dict[int, datetime] = {}
    for row in rows:
        merged = values.setdefault(row.step, {})
        merged.update({k: v for k, v in row.values.items() if v is not None})
        first_seen.setdefault(row.step, row.recorded_at)
    infos = []
    for step in sorted(set(steps)):
        metrics = values.get(step, {})
        made = metrics.get(CHECKPOINT_CREATED_AT_METRIC)
        created = (
            datetime.fromtimestamp(made, UTC)
            if made is not None
            else first_seen.get(step, datetime.now(UTC))
        )
        is_eval = (
            step in finished
            or metrics.get(CHECKPOINT_EVAL_COMPLETED_METRIC, 0.0) > 0
            or any(key.startswith(_EVAL_SPLITS) for key in metrics)
        )
        infos.append(
            CheckpointInfo(
                step=step,
                path=paths(step),
                created_at=created,
                is_eval_step=is_eval,
                metrics=metrics,
            )
        )
    return infos
