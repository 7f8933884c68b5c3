"""Which checkpoint steps to keep: the latest, the best by a metric, the last k, the pinned."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Literal

import attrs

from .errors import InvalidInputError

Direction = Literal["max", "min"]


@attrs.frozen
class RetentionDecision:
    """What `delete_checkpoints` decided. `deleted` is filled in once the backend has acted
    (or, on a dry run, with what it would delete)."""

    keep: frozenset[int]
    best_step: int | None
    metric: str
    reason: str
    deleted: tuple[int, ...] = ()
    dry_run: bool = False

    @property
    def kept(self) -> tuple[int, ...]:
        return tuple(sorted(self.keep))


def best_step(step_means: Mapping[int, float], direction: Direction = "max") -> int | None:
    """The step with the best per-step mean; ties go to the later step."""
    if direction not in ("max", "min"):
        raise InvalidInputError(f"direction must be 'max' or 'min', got {direction!r}")
    best: tuple[float, int] | None = None
    for step, value in step_means.items():
        score = value if direction == "max" else -value
        if best is None or (score, step) > best:
            best = (score, step)
    return None if best is None else best[1]


def decide(
    step_means: Mapping[int, float] | None,
    *,
    latest: int,
    metric: str,
    direction: Direction = "max",
    keep_last: int = 1,
    pinned: Collection[int] = (),
) -> RetentionDecision | None:
    """The keep set, or None when the metric was never logged: then nothing may be deleted
    (the reference kept only the latest there, and users lost their best checkpoints)."""
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
        raise InvalidInputError(f"keep_last must be an integer >= 1, got {keep_last!r}")
    if not step_means:
        return None
    best = best_step(step_means, direction)
    recent = set(range(max(0, latest - keep_last + 1), latest + 1))
    keep = frozenset(recent | set(pinned) | ({best} if best is not None else set()))
    return RetentionDecision(
        keep=keep,
        best_step=best,
        metric=metric,
        reason=f"keep the last {keep_last} step(s) up to {latest}, the best step {best} by "
        f"{direction} {metric}, and pinned steps {sorted(set(pinned))}",
    )
