"""ART's `art.metrics_taxonomy`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.accounting.taxonomy import SFT_GRADIENT_STEP_KEY as SFT_GRADIENT_STEP_KEY
    from arthex.accounting.taxonomy import SFT_METRIC_PREFIX as SFT_METRIC_PREFIX
    from arthex.accounting.taxonomy import (
        SFT_WANDB_GRADIENT_STEP_KEY as SFT_WANDB_GRADIENT_STEP_KEY,
    )
    from arthex.accounting.taxonomy import TRAIN_GRADIENT_STEPS_KEY as TRAIN_GRADIENT_STEPS_KEY
    from arthex.accounting.taxonomy import TrajectoryBatchSummary as TrajectoryBatchSummary
    from arthex.accounting.taxonomy import average_metric_samples as average_metric_samples
    from arthex.accounting.taxonomy import (
        build_data_metrics_from_summary as build_data_metrics_from_summary,
    )
    from arthex.accounting.taxonomy import (
        build_training_summary_metrics as build_training_summary_metrics,
    )
    from arthex.accounting.taxonomy import (
        summarize_trajectory_groups as summarize_trajectory_groups,
    )

    __all__ = [
        "SFT_GRADIENT_STEP_KEY",
        "SFT_METRIC_PREFIX",
        "SFT_WANDB_GRADIENT_STEP_KEY",
        "TRAIN_GRADIENT_STEPS_KEY",
        "TrajectoryBatchSummary",
        "average_metric_samples",
        "build_data_metrics_from_summary",
        "build_training_summary_metrics",
        "summarize_trajectory_groups",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
