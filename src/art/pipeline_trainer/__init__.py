"""ART's `art.pipeline_trainer`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.core.pipeline import PipelineTrainer as PipelineTrainer
    from arthex.core.pipeline import make_group_rollout_fn as make_group_rollout_fn
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
    from arthex.core.pipeline.rollouts import EvalFn as EvalFn
    from arthex.core.pipeline.rollouts import RolloutFn as RolloutFn
    from arthex.core.pipeline.rollouts import ScenarioT as ScenarioT
    from arthex.core.pipeline.rollouts import SingleRolloutFn as SingleRolloutFn
    from arthex.core.pipeline.runtime_config import PipelineRuntimeConfig as PipelineRuntimeConfig
    from arthex.utils.pipeline_tuner import PipelineAutotuneConfig as PipelineAutotuneConfig

    __all__ = [
        "CHECKPOINT_CREATED_AT_METRIC",
        "CHECKPOINT_EVAL_COMPLETED_METRIC",
        "CHECKPOINT_SAVED_METRIC",
        "CheckpointInfo",
        "CheckpointRetentionContext",
        "CheckpointRetentionStrategy",
        "EvalFn",
        "PipelineAutotuneConfig",
        "PipelineRuntimeConfig",
        "PipelineTrainer",
        "RolloutFn",
        "ScenarioT",
        "SingleRolloutFn",
        "keep_recent_and_top",
        "make_group_rollout_fn",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
