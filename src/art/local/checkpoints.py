"""ART's `art.local.checkpoints`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.checkpoints import delete_checkpoints as delete_checkpoints
    from arthex.utils.checkpoints import get_last_checkpoint_dir as get_last_checkpoint_dir
    from arthex.utils.checkpoints import (
        migrate_checkpoints_to_new_structure as migrate_checkpoints_to_new_structure,
    )

    __all__ = [
        "delete_checkpoints",
        "get_last_checkpoint_dir",
        "migrate_checkpoints_to_new_structure",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
