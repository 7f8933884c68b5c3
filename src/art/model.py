"""ART's `art.model`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.composition.api import Model as Model
    from arthex.composition.api import TrainableModel as TrainableModel
    from arthex.core.metrics import SECTIONS as METRIC_SECTIONS
    from arthex.core.metrics import SPLITS as METRIC_SPLITS

    __all__ = ["METRIC_SECTIONS", "METRIC_SPLITS", "Model", "TrainableModel"]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
