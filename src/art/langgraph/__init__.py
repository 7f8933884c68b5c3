"""ART's `art.langgraph`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.composition.langgraph import init_chat_model as init_chat_model
    from arthex.composition.langgraph import wrap_rollout as wrap_rollout

    __all__ = ["init_chat_model", "wrap_rollout"]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
