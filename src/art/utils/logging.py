"""ART's `art.utils.logging`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.status_lines import dim as dim
    from arthex.utils.status_lines import err as err
    from arthex.utils.status_lines import info as info
    from arthex.utils.status_lines import ok as ok
    from arthex.utils.status_lines import step as step
    from arthex.utils.status_lines import warn as warn

    __all__ = [
        "dim",
        "err",
        "info",
        "ok",
        "step",
        "warn",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
