"""The pipeline: rollouts overlap training, with bounded staleness and exactly-once resume."""

from ..pipeline_record import InFlight, PipelineRecord
from .rollouts import EvalFn, RolloutFn, SingleRolloutFn, make_group_rollout_fn
from .trainer import PipelineTrainer, StepCallback

__all__ = [
    "EvalFn",
    "InFlight",
    "PipelineRecord",
    "PipelineTrainer",
    "RolloutFn",
    "SingleRolloutFn",
    "StepCallback",
    "make_group_rollout_fn",
]
