"""ART's `art.yield_trajectory`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.composition.yield_trajectory import YieldTrajectoryContext as YieldTrajectoryContext
    from arthex.composition.yield_trajectory import (
        capture_yielded_trajectory as capture_yielded_trajectory,
    )
    from arthex.composition.yield_trajectory import yield_trajectory as yield_trajectory
    from arthex.composition.yield_trajectory import (
        yield_trajectory_context_var as yield_trajectory_context_var,
    )

    __all__ = [
        "YieldTrajectoryContext",
        "capture_yielded_trajectory",
        "yield_trajectory",
        "yield_trajectory_context_var",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
