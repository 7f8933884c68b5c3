"""arthex: train LLM agents with reinforcement learning from their own rollouts.

Importing arthex is light: names are resolved on first use, so torch, wandb, vllm and tinker
are imported only by the adapter that needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Model": "arthex.composition.api",
    "TrainableModel": "arthex.composition.api",
    "PipelineTrainer": "arthex.core.pipeline",
    "make_group_rollout_fn": "arthex.core.pipeline",
    "TrainResult": "arthex.core.model",
    "TrainConfig": "arthex.core.config",
    "TrainSFTConfig": "arthex.core.sft",
    "Conversation": "arthex.core.conversations",
    "create_lr_schedule": "arthex.core.sft",
    "Trajectory": "arthex.core.trajectories",
    "TrajectoryGroup": "arthex.core.trajectories",
    "History": "arthex.core.trajectories",
    "CapturedException": "arthex.core.trajectories",
    "trajectory_group": "arthex.core.trajectories",
    "capture": "arthex.composition.capture",
    "capture_trajectory": "arthex.composition.capture",
    "capture_trajectory_group": "arthex.composition.capture",
    "current_trajectory": "arthex.composition.capture",
    "no_capture": "arthex.composition.capture",
    "Environment": "arthex.core.environments",
    "evaluate": "arthex.core.evaluation",
    "EvaluationResult": "arthex.core.evaluation",
    "gather_trajectory_groups": "arthex.core.gather",
    "gather_trajectories": "arthex.core.gather",
    "trajectory_group_batches": "arthex.core.batch_stream",
    "Messages": "arthex.core.chat_types",
    "MessagesAndChoices": "arthex.core.chat_types",
    "Tools": "arthex.core.chat_types",
    "RunRef": "arthex.core.identity",
    "ModelSpec": "arthex.core.identity",
    "MetricsRow": "arthex.core.metrics",
    "RetentionDecision": "arthex.core.retention",
    "group_advantages": "arthex.core.advantages",
    "ArthexError": "arthex.core.errors",
    "InvalidInputError": "arthex.core.errors",
    "InvalidNameError": "arthex.core.errors",
    "NotRegisteredError": "arthex.core.errors",
    "UnsupportedCapability": "arthex.core.errors",
    "CorruptDataError": "arthex.core.errors",
    "BackendError": "arthex.core.errors",
    "TooManyExceptionsError": "arthex.core.errors",
    "MissingExtraError": "arthex.core.errors",
    "RunBusyError": "arthex.core.errors",
    "LocalBackend": "arthex.adapters.local",
    "ServerlessBackend": "arthex.adapters.serverless",
    "TinkerBackend": "arthex.adapters.tinker",
    "ParquetTrajectoryStore": "arthex.adapters.parquet.store",
    "JsonlHistory": "arthex.adapters.jsonl_history",
    "WandbReporter": "arthex.adapters.wandb_reporter",
    "load_trajectories": "arthex.apps.loaders",
    "load_history": "arthex.apps.loaders",
    "retry": "arthex.utils.retry",
    "load_sft_dataset": "arthex.apps.sft_dataset",
}
# Subpackages reachable as attributes (`arthex.utils.iterate_dataset(...)`, as in ART, and
# `arthex.environments.from_verifiers(...)`).
_SUBPACKAGES = ("utils", "environments")

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        package = importlib.import_module(f"arthex.{name}")
        globals()[name] = package
        return package
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'arthex' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names only: not the helpers this module itself imports."""
    return sorted({*_EXPORTS, *_SUBPACKAGES, "__version__"})


if TYPE_CHECKING:
    from .adapters.jsonl_history import JsonlHistory as JsonlHistory
    from .adapters.local import LocalBackend as LocalBackend
    from .adapters.parquet.store import ParquetTrajectoryStore as ParquetTrajectoryStore
    from .adapters.serverless import ServerlessBackend as ServerlessBackend
    from .adapters.tinker import TinkerBackend as TinkerBackend
    from .adapters.wandb_reporter import WandbReporter as WandbReporter
    from .apps.loaders import load_history as load_history
    from .apps.loaders import load_trajectories as load_trajectories
    from .apps.sft_dataset import load_sft_dataset as load_sft_dataset
    from .composition.api import Model as Model
    from .composition.api import TrainableModel as TrainableModel
    from .composition.capture import capture as capture
    from .composition.capture import capture_trajectory as capture_trajectory
    from .composition.capture import capture_trajectory_group as capture_trajectory_group
    from .composition.capture import current_trajectory as current_trajectory
    from .composition.capture import no_capture as no_capture
    from .core.advantages import group_advantages as group_advantages
    from .core.batch_stream import trajectory_group_batches as trajectory_group_batches
    from .core.chat_types import Messages as Messages
    from .core.chat_types import MessagesAndChoices as MessagesAndChoices
    from .core.chat_types import Tools as Tools
    from .core.config import TrainConfig as TrainConfig
    from .core.conversations import Conversation as Conversation
    from .core.environments import Environment as Environment
    from .core.errors import ArthexError as ArthexError
    from .core.errors import BackendError as BackendError
    from .core.errors import CorruptDataError as CorruptDataError
    from .core.errors import InvalidInputError as InvalidInputError
    from .core.errors import InvalidNameError as InvalidNameError
    from .core.errors import MissingExtraError as MissingExtraError
    from .core.errors import NotRegisteredError as NotRegisteredError
    from .core.errors import RunBusyError as RunBusyError
    from .core.errors import TooManyExceptionsError as TooManyExceptionsError
    from .core.errors import UnsupportedCapability as UnsupportedCapability
    from .core.evaluation import EvaluationResult as EvaluationResult
    from .core.evaluation import evaluate as evaluate
    from .core.gather import gather_trajectories as gather_trajectories
    from .core.gather import gather_trajectory_groups as gather_trajectory_groups
    from .core.identity import ModelSpec as ModelSpec
    from .core.identity import RunRef as RunRef
    from .core.metrics import MetricsRow as MetricsRow
    from .core.model import TrainResult as TrainResult
    from .core.pipeline import PipelineTrainer as PipelineTrainer
    from .core.pipeline import make_group_rollout_fn as make_group_rollout_fn
    from .core.retention import RetentionDecision as RetentionDecision
    from .core.sft import TrainSFTConfig as TrainSFTConfig
    from .core.sft import create_lr_schedule as create_lr_schedule
    from .core.trajectories import CapturedException as CapturedException
    from .core.trajectories import History as History
    from .core.trajectories import Trajectory as Trajectory
    from .core.trajectories import TrajectoryGroup as TrajectoryGroup
    from .core.trajectories import trajectory_group as trajectory_group
    from .utils.retry import retry as retry
