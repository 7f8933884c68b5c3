"""ART's `art.utils.suppress_litellm_serialization_warnings`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.rollout_checks import (
        suppress_litellm_serialization_warnings as suppress_litellm_serialization_warnings,
    )

    __all__ = ["suppress_litellm_serialization_warnings"]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
