"""ART's `art.utils.safetensors`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.adapters.local.safetensors_stream import PreparedSafetensors as PreparedSafetensors
    from arthex.adapters.local.safetensors_stream import SafetensorsLayout as SafetensorsLayout
    from arthex.adapters.local.safetensors_stream import prepare_safetensors as prepare_safetensors
    from arthex.adapters.local.safetensors_stream import (
        save_prepared_safetensors as save_prepared_safetensors,
    )
    from arthex.adapters.local.safetensors_stream import save_safetensors as save_safetensors

    __all__ = [
        "PreparedSafetensors",
        "SafetensorsLayout",
        "prepare_safetensors",
        "save_prepared_safetensors",
        "save_safetensors",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
