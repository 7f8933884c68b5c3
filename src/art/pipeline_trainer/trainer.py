"""ART's `art.pipeline_trainer.trainer`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.adapters.run_files.art_pipeline import PIPELINE_STATE_KEY as PIPELINE_STATE_KEY
    from arthex.core.pipeline import PipelineTrainer as PipelineTrainer
    from arthex.core.pipeline import make_group_rollout_fn as make_group_rollout_fn

    __all__ = ["PIPELINE_STATE_KEY", "PipelineTrainer", "make_group_rollout_fn"]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
