"""Which captured trajectories a `train` call trains: incomplete ones only when asked."""

from __future__ import annotations

from collections.abc import Sequence

from ..config import TrainConfig
from ..trajectories import Trajectory, TrajectoryGroup


def training_groups(
    groups: Sequence[TrajectoryGroup], config: TrainConfig
) -> list[TrajectoryGroup]:
    """The groups as the backend should see them.

    By default a trajectory flagged incomplete (its agent raised mid-episode) is left out, so it
    shifts no advantage; it stays in the logged groups. With
    `config.train_incomplete_trajectories`, incomplete trajectories are trained, and so are the
    partial trajectories kept on a group's exception entries (with the reward they hold).
    Groups that need no change are passed through as they are."""
    result: list[TrajectoryGroup] = []
    for group in groups:
        kept: list[Trajectory]
        if config.train_incomplete_trajectories:
            partial = [e.trajectory for e in group.exceptions if e.trajectory is not None]
            if not partial:
                result.append(group)
                continue
            kept = [*group.trajectories, *partial]
        else:
            kept = [t for t in group.trajectories if not t.incomplete]
            if len(kept) == len(group.trajectories):
                result.append(group)
                continue
        result.append(
            TrajectoryGroup.model_construct(
                trajectories=kept,
                exceptions=group.exceptions,
                metadata=group.metadata,
                metrics=group.metrics,
                logs=group.logs,
            )
        )
    return result
