"""ART's `art.utils.group_aggregate`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.adapters.local.group_aggregate import Reduction as Reduction
    from arthex.adapters.local.group_aggregate import group_aggregate as group_aggregate

    __all__ = [
        "Reduction",
        "group_aggregate",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
