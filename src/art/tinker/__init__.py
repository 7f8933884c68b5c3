"""ART's `art.tinker`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.adapters.tinker import TinkerBackend as TinkerBackend
    from arthex.adapters.tinker.openai_server import (
        TinkerOpenAIServer as OpenAICompatibleTinkerServer,
    )
    from arthex.utils.tinker_renderers import get_renderer_name as get_renderer_name

    __all__ = ["OpenAICompatibleTinkerServer", "TinkerBackend", "get_renderer_name"]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
