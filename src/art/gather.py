"""ART's `art.gather`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.core.gather import gather_trajectories as gather_trajectories
    from arthex.core.gather import gather_trajectory_groups as gather_trajectory_groups
    from arthex.utils.gather_context import GatherContext as GatherContext
    from arthex.utils.gather_context import gather_context_var as gather_context_var
    from arthex.utils.gather_context import get_gather_context as get_gather_context
    from arthex.utils.gather_context import record_metrics as record_metrics
    from arthex.utils.gather_context import (
        record_trajectory_completion_tokens as record_trajectory_completion_tokens,
    )
    from arthex.utils.gather_context import set_gather_context as set_gather_context
    from arthex.utils.gather_context import wrap_group_awaitable as wrap_group_awaitable
    from arthex.utils.gather_context import (
        wrap_trajectories_awaitable as wrap_trajectories_awaitable,
    )

    __all__ = [
        "GatherContext",
        "gather_context_var",
        "gather_trajectories",
        "gather_trajectory_groups",
        "get_gather_context",
        "record_metrics",
        "record_trajectory_completion_tokens",
        "set_gather_context",
        "wrap_group_awaitable",
        "wrap_trajectories_awaitable",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
