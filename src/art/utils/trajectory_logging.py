"""ART's `art.utils.trajectory_logging`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.adapters.parquet.single_file import (
        read_trajectory_groups_parquet as read_trajectory_groups_parquet,
    )
    from arthex.adapters.parquet.single_file import (
        write_trajectory_groups_parquet as write_trajectory_groups_parquet,
    )

    __all__ = [
        "read_trajectory_groups_parquet",
        "write_trajectory_groups_parquet",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
