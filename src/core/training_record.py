"""How `log` recognises what this model's own training already recorded.

ART 0.5.23 trains through the backend and has the script log the result:

    result = await backend.train(model, groups, learning_rate=...)
    await model.log(groups, metrics=result.metrics, step=result.step, split="train")

arthex records the training row itself, when the update is durable, whichever way training
was called (so a script that never logs it loses nothing). The pair is recognised by value:
at a step where this model recorded a training row, a logged metric whose qualified key and
value equal that row's is already in the history and is not written again, so the call above
adds only the groups (one part, one summary row). And groups that `model.train` already
logged, passed to `log` again as the same objects, are not written twice (with a warning).
Only this process's own training is known; rows from other processes are never touched.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from .trajectories import TrajectoryGroup

logger = logging.getLogger("arthex")

KEPT_STEPS = 4  # training rows remembered: a script logs a result right after training


class TrainingRecord:
    def __init__(self) -> None:
        self._rows: dict[int, Mapping[str, float | None]] = {}
        self._logged: tuple[int, tuple[int, ...], Sequence[TrajectoryGroup]] | None = None

    def trained(self, step: int, values: Mapping[str, float | None]) -> None:
        """The training row recorded at `step`."""
        self._rows[step] = dict(values)
        for old in sorted(self._rows)[:-KEPT_STEPS]:
            del self._rows[old]

    def logged_by_train(self, step: int, groups: Sequence[TrajectoryGroup]) -> None:
        """`train` logged these groups at `step` (kept alive, so their ids stay theirs)."""
        self._logged = (step, tuple(id(group) for group in groups), list(groups))

    def not_yet_recorded(self, step: int, metrics: dict[str, Any]) -> dict[str, Any]:
        """`metrics` (qualified keys) without the ones the training row at `step` holds."""
        row = self._rows.get(step)
        if row is None:
            return metrics
        return {key: value for key, value in metrics.items() if key not in row or row[key] != value}

    def not_yet_logged(self, groups: list[TrajectoryGroup], split: str) -> list[TrajectoryGroup]:
        """`groups`, or none when they are the very groups `train` logged last."""
        if split != "train" or self._logged is None or not groups:
            return groups
        step, ids, _ = self._logged
        if tuple(id(group) for group in groups) != ids:
            return groups
        logger.warning(
            "these %d groups were already logged by model.train at step %d (it logs the groups "
            "it trains on); not logging them again. With model.train, log only evaluations; "
            "with backend.train, log the groups yourself",
            len(groups),
            step,
        )
        return []
