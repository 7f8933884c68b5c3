"""ART's `art.utils.cache_dirs`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.cache_dirs import cache_filesystem_type as cache_filesystem_type
    from arthex.utils.cache_dirs import compiler_cache_root as compiler_cache_root
    from arthex.utils.cache_dirs import configure_model_cache_env as configure_model_cache_env
    from arthex.utils.cache_dirs import network_cache_warning as network_cache_warning

    __all__ = [
        "cache_filesystem_type",
        "compiler_cache_root",
        "configure_model_cache_env",
        "network_cache_warning",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
