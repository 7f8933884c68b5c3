"""ART's `art.trajectories`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.composition.capture import current_trajectory as current_trajectory
    from arthex.composition.capture import no_capture as no_capture
    from arthex.core.exchanges import SequenceHistory as History
    from arthex.core.trajectories import CapturedException as PydanticException
    from arthex.core.trajectories import History as LegacyHistory
    from arthex.core.trajectories import MetadataValue as MetadataValue
    from arthex.core.trajectories import Trajectory as Trajectory
    from arthex.core.trajectories import TrajectoryGroup as TrajectoryGroup
    from arthex.core.trajectories import trajectory_group as trajectory_group

    __all__ = [
        "History",
        "LegacyHistory",
        "MetadataValue",
        "PydanticException",
        "Trajectory",
        "TrajectoryGroup",
        "current_trajectory",
        "no_capture",
        "trajectory_group",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
