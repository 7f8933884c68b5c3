"""ART's `art.mcp.generate_scenarios`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.environments.mcp_scenarios import generate_scenarios as generate_scenarios
    from arthex.environments.mcp_scenarios import preview_scenarios as preview_scenarios

    __all__ = ["generate_scenarios", "preview_scenarios"]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
