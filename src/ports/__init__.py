"""The ports the core depends on: three roles, one module each, protocols only.

- `trajectory_store`: TrajectoryStore, where trajectories and the model's card live, with the
  run directory's other data as its facets (RunStateStore, PipelineStateStore);
- `metrics_reporter`: MetricsReporter, where rows go, and MetricsHistory, the ledger the
  policies read;
- `training_backend`: TrainingBackend, which trains and serves, with its facets (capabilities,
  SFT, export, step metrics, the checkpoint files retention drives: CheckpointFiles) and the
  run lease that guards its checkpoints (RunLeases).
"""

from .metrics_reporter import (
    ConfigRecorder,
    MetricsHistory,
    MetricsReporter,
    SampleRecorder,
    Startable,
)
from .training_backend import (
    BackendCapabilities,
    Capability,
    CheckpointFiles,
    HeldLease,
    InferenceEndpoint,
    LeaseHolder,
    RunLeases,
    StepMetricsSource,
    TrainingBackend,
    UnsupportedCapability,
)
from .trajectory_store import PipelineStateStore, RunStateStore, TrajectoryStore

__all__ = [
    "BackendCapabilities",
    "Capability",
    "CheckpointFiles",
    "ConfigRecorder",
    "HeldLease",
    "InferenceEndpoint",
    "LeaseHolder",
    "MetricsHistory",
    "MetricsReporter",
    "PipelineStateStore",
    "RunLeases",
    "RunStateStore",
    "SampleRecorder",
    "Startable",
    "StepMetricsSource",
    "TrainingBackend",
    "TrajectoryStore",
    "UnsupportedCapability",
]
