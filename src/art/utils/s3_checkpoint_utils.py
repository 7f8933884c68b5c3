"""ART's `art.utils.s3_checkpoint_utils`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.s3_checkpoints import (
        get_checkpoint_step_not_after_from_s3 as get_checkpoint_step_not_after_from_s3,
    )
    from arthex.utils.s3_checkpoints import (
        get_latest_checkpoint_step_from_s3 as get_latest_checkpoint_step_from_s3,
    )
    from arthex.utils.s3_checkpoints import (
        migrate_s3_checkpoints_to_new_structure as migrate_s3_checkpoints_to_new_structure,
    )

    __all__ = [
        "get_checkpoint_step_not_after_from_s3",
        "get_latest_checkpoint_step_from_s3",
        "migrate_s3_checkpoints_to_new_structure",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
