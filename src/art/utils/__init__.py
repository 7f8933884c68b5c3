"""ART's `art.utils`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.format_message import format_message as format_message
    from arthex.utils.iterate_dataset import iterate_dataset as iterate_dataset
    from arthex.utils.limit_concurrency import limit_concurrency as limit_concurrency
    from arthex.utils.log_http_errors import log_http_errors as log_http_errors
    from arthex.utils.output_dirs import get_model_step as get_model_step
    from arthex.utils.record_provenance import record_provenance as record_provenance
    from arthex.utils.retry import retry as retry

    __all__ = [
        "format_message",
        "get_model_step",
        "iterate_dataset",
        "limit_concurrency",
        "log_http_errors",
        "record_provenance",
        "retry",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
