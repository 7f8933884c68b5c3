"""Which checkpoint steps to keep: the latest, the best by a metric, the last k, the pinned."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Literal

import attrs

from .errors import InvalidInputError
from .history_index import StepMeanListener

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


def _check_direction(direction: str) -> None:
    if direction not in ("max", "min"):
        raise InvalidInputError(f"direction must be 'max' or 'min', got {direction!r}")


def best_step(step_means: Mapping[int, float], direction: Direction = "max") -> int | None:
    """The step with the best per-step mean; ties go to the later step."""
    _check_direction(direction)
    sign = 1.0 if direction == "max" else -1.0
    best = max(((sign * value, step) for step, value in step_means.items()), default=None)
    return None if best is None else best[1]


class BestStep(StepMeanListener):
    """The best step by one metric, kept as per-step means change: O(1) per change, except
    when the best step itself gets worse (then one rescan)."""

    def __init__(self, direction: Direction = "max") -> None:
        _check_direction(direction)
        self._sign = 1.0 if direction == "max" else -1.0
        self._means: dict[int, float] = {}
        self._best: tuple[float, int] | None = None

    def step_mean_changed(self, step: int, old: float | None, new: float) -> None:
        self._means[step] = new
        candidate = (self._sign * new, step)
        if self._best is None or candidate >= self._best:
            self._best = candidate
        elif self._best[1] == step:  # the best got worse: someone else may lead now
            self._best = max((self._sign * v, s) for s, v in self._means.items())

    def step_mean_removed(self, step: int, old: float) -> None:
        del self._means[step]
        if self._best is not None and self._best[1] == step:
            self._best = max(((self._sign * v, s) for s, v in self._means.items()), default=None)

    @property
    def step(self) -> int | None:
        return None if self._best is None else self._best[1]


def decide(
    best: int | None,
    *,
    latest: int,
    metric: str,
    direction: Direction = "max",
    keep_last: int = 1,
    pinned: Collection[int] = (),
) -> RetentionDecision | None:
    """The keep set given the best step, or None when the metric was never logged (`best` is
    None): then nothing may be deleted (the reference kept only the latest there, and users
    lost their best checkpoints)."""
    _check_direction(direction)
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
        raise InvalidInputError(f"keep_last must be an integer >= 1, got {keep_last!r}")
    if best is None:
        return None
    recent = set(range(max(0, latest - keep_last + 1), latest + 1))
    keep = frozenset(recent | set(pinned) | {best})
    return RetentionDecision(
        keep=keep,
        best_step=best,
        metric=metric,
        reason=f"keep the last {keep_last} step(s) up to {latest}, the best step {best} by "
        f"{direction} {metric}, and pinned steps {sorted(set(pinned))}",
    )
