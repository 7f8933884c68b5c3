"""ART's `art.utils.get_model_step`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.output_dirs import get_model_step as get_model_step
    from arthex.utils.output_dirs import get_step_from_dir as get_step_from_dir

    __all__ = [
        "get_model_step",
        "get_step_from_dir",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
