"""ART's `art.pipeline_tuner.autotune`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.pipeline_tuner import build_initial_settings as build_initial_settings
    from arthex.utils.pipeline_tuner import freshness_worker_limit as freshness_worker_limit
    from arthex.utils.pipeline_tuner import recommended_queue_size as recommended_queue_size

    __all__ = [
        "build_initial_settings",
        "freshness_worker_limit",
        "recommended_queue_size",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
