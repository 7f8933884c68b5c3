"""ART's `art.utils.old_benchmarking.types`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.apps.old_benchmarking import BenchmarkedModel as BenchmarkedModel
    from arthex.apps.old_benchmarking import BenchmarkedModelKey as BenchmarkedModelKey
    from arthex.apps.old_benchmarking import BenchmarkedModelStep as BenchmarkedModelStep

    __all__ = ["BenchmarkedModel", "BenchmarkedModelKey", "BenchmarkedModelStep"]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
