"""ART's import paths, under arthex: `import arthex.art as art` (or rename `art.` to
`arthex.art.` in import lines) and an ART 0.5.23 script's imports resolve to arthex's own
objects.

The tree mirrors ART's: `arthex.art.types.TrainConfig` is `arthex.TrainConfig`,
`arthex.art.local.LocalBackend` is `arthex.LocalBackend`, `arthex.art.dev.InternalModelConfig`
is a plain-dict shape the model accepts (and warns it ignores). A module or name of ART's that
arthex does not implement raises `arthex.core.errors.NotInArthexError` at import or on first
use, with one line saying what to use instead; docs/migrating-from-art.md lists every path.

Importing this package is light: each name is imported on first use, so torch comes in only
with the backend that needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.accounting.builder import MetricDefinition as MetricDefinition
    from arthex.accounting.catalogue import (
        PIPELINE_RL_DASHBOARD_DEFAULT_METRICS as PIPELINE_RL_DASHBOARD_DEFAULT_METRICS,
    )
    from arthex.accounting.catalogue import (
        PIPELINE_RL_METRIC_DEFINITIONS as PIPELINE_RL_METRIC_DEFINITIONS,
    )
    from arthex.accounting.catalogue import PIPELINE_RL_SCORE_METRICS as PIPELINE_RL_SCORE_METRICS
    from arthex.adapters.serverless import ServerlessBackend as ServerlessBackend
    from arthex.adapters.train_results import LocalTrainResult as LocalTrainResult
    from arthex.adapters.train_results import ServerlessTrainResult as ServerlessTrainResult
    from arthex.art import dev as dev
    from arthex.art.dev import LoRAConfig as LoRAConfig
    from arthex.composition.api import Model as Model
    from arthex.composition.api import TrainableModel as TrainableModel
    from arthex.composition.capture import capture_calls as trajectory
    from arthex.composition.capture import current_trajectory as current_trajectory
    from arthex.composition.capture import no_capture as no_capture
    from arthex.composition.yield_trajectory import (
        capture_yielded_trajectory as capture_yielded_trajectory,
    )
    from arthex.composition.yield_trajectory import yield_trajectory as yield_trajectory
    from arthex.core.backend_train import BackendTrainEntry as Backend
    from arthex.core.batch_stream import trajectory_group_batches as trajectory_group_batches
    from arthex.core.chat_types import Messages as Messages
    from arthex.core.chat_types import MessagesAndChoices as MessagesAndChoices
    from arthex.core.chat_types import Tools as Tools
    from arthex.core.config import TrainConfig as TrainConfig
    from arthex.core.errors import ServingUnavailableError as LocalServingUnavailableError
    from arthex.core.gather import gather_trajectories as gather_trajectories
    from arthex.core.gather import gather_trajectory_groups as gather_trajectory_groups
    from arthex.core.model import TrainResult as TrainResult
    from arthex.core.pipeline.runtime_config import PipelineRuntimeConfig as PipelineRuntimeConfig
    from arthex.core.sft import TrainSFTConfig as TrainSFTConfig
    from arthex.core.trajectories import Trajectory as Trajectory
    from arthex.core.trajectories import TrajectoryGroup as TrajectoryGroup
    from arthex.core.trajectories import trajectory_group as trajectory_group
    from arthex.utils.pipeline_tuner import PipelineAutotuneConfig as PipelineAutotuneConfig
    from arthex.utils.retry import retry as retry
    from arthex.utils.tokenizer import get_tokenizer as get_tokenizer
    from arthex.utils.trajectory_tokenizing import tensorize as tensorize
    from arthex.utils.trajectory_tokenizing import tokenize as tokenize

    __all__ = [
        "PIPELINE_RL_DASHBOARD_DEFAULT_METRICS",
        "PIPELINE_RL_METRIC_DEFINITIONS",
        "PIPELINE_RL_SCORE_METRICS",
        "Backend",
        "LoRAConfig",
        "LocalServingUnavailableError",
        "LocalTrainResult",
        "Messages",
        "MessagesAndChoices",
        "MetricDefinition",
        "Model",
        "PipelineAutotuneConfig",
        "PipelineRuntimeConfig",
        "ServerlessBackend",
        "ServerlessTrainResult",
        "Tools",
        "TrainConfig",
        "TrainResult",
        "TrainSFTConfig",
        "TrainableModel",
        "Trajectory",
        "TrajectoryGroup",
        "capture_yielded_trajectory",
        "current_trajectory",
        "dev",
        "gather_trajectories",
        "gather_trajectory_groups",
        "get_tokenizer",
        "no_capture",
        "retry",
        "tensorize",
        "tokenize",
        "trajectory",
        "trajectory_group",
        "trajectory_group_batches",
        "yield_trajectory",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
