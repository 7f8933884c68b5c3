"""ART's `art.trajectories.tensors`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.tensorized_trajectories import TensorizedHistory as TensorizedHistory
    from arthex.utils.tensorized_trajectories import (
        TensorizedMultiHistoryTrajectory as TensorizedMultiHistoryTrajectory,
    )
    from arthex.utils.tensorized_trajectories import TensorizedTopK as TensorizedTopK
    from arthex.utils.tensorized_trajectories import TensorizedTrajectory as TensorizedTrajectory
    from arthex.utils.tensorized_trajectories import (
        TensorizedTrajectoryGroup as TensorizedTrajectoryGroup,
    )

    __all__ = [
        "TensorizedHistory",
        "TensorizedMultiHistoryTrajectory",
        "TensorizedTopK",
        "TensorizedTrajectory",
        "TensorizedTrajectoryGroup",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
