"""ART's `art.backend`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.composition.api import Model as AnyModel
    from arthex.composition.api import TrainableModel as AnyTrainableModel
    from arthex.core.backend_train import BackendTrainEntry as Backend

    __all__ = ["AnyModel", "AnyTrainableModel", "Backend"]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
