"""ART's `art.tinker_native.backend`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.adapters.tinker import TinkerBackend as TinkerNativeBackend
    from arthex.adapters.tinker.art_state import STATE_KEY_LATEST_STEP, STATE_KEY_RUN_IDS

    __all__ = ["STATE_KEY_LATEST_STEP", "STATE_KEY_RUN_IDS", "TinkerNativeBackend"]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
