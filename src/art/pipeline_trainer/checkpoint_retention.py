"""ART's `art.pipeline_trainer.checkpoint_retention`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.core.pipeline.retention_strategy import (
        CHECKPOINT_CREATED_AT_METRIC as CHECKPOINT_CREATED_AT_METRIC,
    )
    from arthex.core.pipeline.retention_strategy import (
        CHECKPOINT_EVAL_COMPLETED_METRIC as CHECKPOINT_EVAL_COMPLETED_METRIC,
    )
    from arthex.core.pipeline.retention_strategy import (
        CHECKPOINT_SAVED_METRIC as CHECKPOINT_SAVED_METRIC,
    )
    from arthex.core.pipeline.retention_strategy import CheckpointInfo as CheckpointInfo
    from arthex.core.pipeline.retention_strategy import (
        RetentionContext as CheckpointRetentionContext,
    )
    from arthex.core.pipeline.retention_strategy import (
        RetentionStrategy as CheckpointRetentionStrategy,
    )
    from arthex.core.pipeline.retention_strategy import keep_recent_and_top as keep_recent_and_top

    __all__ = [
        "CHECKPOINT_CREATED_AT_METRIC",
        "CHECKPOINT_EVAL_COMPLETED_METRIC",
        "CHECKPOINT_SAVED_METRIC",
        "CheckpointInfo",
        "CheckpointRetentionContext",
        "CheckpointRetentionStrategy",
        "keep_recent_and_top",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
