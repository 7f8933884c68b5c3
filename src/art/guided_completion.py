"""ART's `art.guided_completion`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.guided_completion import freeze_tool_schema as freeze_tool_schema
    from arthex.utils.guided_completion import (
        get_guided_completion_params as get_guided_completion_params,
    )

    __all__ = ["freeze_tool_schema", "get_guided_completion_params"]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
