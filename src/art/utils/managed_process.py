"""ART's `art.utils.managed_process`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.managed_process import main as main
    from arthex.utils.managed_process import parse_args as parse_args
    from arthex.utils.managed_process import set_parent_death_signal as set_parent_death_signal

    __all__ = ["main", "parse_args", "set_parent_death_signal"]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
