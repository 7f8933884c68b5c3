"""ART's `art.utils.get_repo_root_path`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.repo_root import get_repo_root_path as get_repo_root_path

    __all__ = ["get_repo_root_path"]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
