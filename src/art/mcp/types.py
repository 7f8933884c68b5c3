"""ART's `art.mcp.types`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.environments.mcp_scenarios import GeneratedScenario as GeneratedScenario
    from arthex.environments.mcp_scenarios import (
        GeneratedScenarioCollection as GeneratedScenarioCollection,
    )
    from arthex.environments.mcp_scenarios import MCPResource as MCPResource
    from arthex.environments.mcp_scenarios import MCPTool as MCPTool

    __all__ = ["GeneratedScenario", "GeneratedScenarioCollection", "MCPResource", "MCPTool"]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
