"""ART's `art.serverless.client`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.adapters.serverless.api import Checkpoints as Checkpoints
    from arthex.adapters.serverless.api import Client as Client
    from arthex.adapters.serverless.api import Models as Models
    from arthex.adapters.serverless.api import SFTTrainingJobs as SFTTrainingJobs
    from arthex.adapters.serverless.api import TrainingJobEvents as TrainingJobEvents
    from arthex.adapters.serverless.api import TrainingJobs as TrainingJobs
    from arthex.adapters.serverless.api_types import Checkpoint as Checkpoint
    from arthex.adapters.serverless.api_types import CheckpointListParams as CheckpointListParams
    from arthex.adapters.serverless.api_types import (
        DeleteCheckpointsResponse as DeleteCheckpointsResponse,
    )
    from arthex.adapters.serverless.api_types import (
        ExperimentalTrainingConfig as ExperimentalTrainingConfig,
    )
    from arthex.adapters.serverless.api_types import Model as Model
    from arthex.adapters.serverless.api_types import SFTTrainingConfig as SFTTrainingConfig
    from arthex.adapters.serverless.api_types import SFTTrainingJob as SFTTrainingJob
    from arthex.adapters.serverless.api_types import TrainingJob as TrainingJob
    from arthex.adapters.serverless.api_types import TrainingJobEvent as TrainingJobEvent
    from arthex.adapters.serverless.api_types import (
        TrainingJobEventListParams as TrainingJobEventListParams,
    )

    __all__ = [
        "Checkpoint",
        "CheckpointListParams",
        "Checkpoints",
        "Client",
        "DeleteCheckpointsResponse",
        "ExperimentalTrainingConfig",
        "Model",
        "Models",
        "SFTTrainingConfig",
        "SFTTrainingJob",
        "SFTTrainingJobs",
        "TrainingJob",
        "TrainingJobEvent",
        "TrainingJobEventListParams",
        "TrainingJobEvents",
        "TrainingJobs",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
