"""ART's `art.tinker.renderers`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.tinker_renderers import get_renderer_name as get_renderer_name
    from arthex.utils.tinker_renderers import (
        is_qwen3_dot_family_model as is_qwen3_dot_family_model,
    )
    from arthex.utils.tinker_renderers import renderer_name_message as renderer_name_message

    __all__ = ["get_renderer_name", "is_qwen3_dot_family_model", "renderer_name_message"]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
