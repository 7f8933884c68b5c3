"""ART's `art.utils.sft`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.core.sft import create_lr_schedule as create_lr_schedule
    from arthex.utils.sft import SFTChunk as SFTChunk
    from arthex.utils.sft import create_sft_dataset_iterator as create_sft_dataset_iterator
    from arthex.utils.sft import get_file_row_count as get_file_row_count
    from arthex.utils.sft import iterate_file as iterate_file
    from arthex.utils.sft import resolve_sft_batch_size as resolve_sft_batch_size
    from arthex.utils.sft import train_sft_from_file as train_sft_from_file

    __all__ = [
        "SFTChunk",
        "create_lr_schedule",
        "create_sft_dataset_iterator",
        "get_file_row_count",
        "iterate_file",
        "resolve_sft_batch_size",
        "train_sft_from_file",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
