"""ART's `art.utils.old_benchmarking.generate_comparison_table`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.apps.old_benchmarking import generate_comparison_table as generate_comparison_table

    __all__ = ["generate_comparison_table"]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
