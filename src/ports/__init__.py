"""The ports the core depends on: the three roles (store, history, backend), the run lease
and the pipeline record.
Protocols only, no implementation."""

from .metrics_reporter import (
    ConfigRecorder,
    MetricsHistory,
    MetricsReporter,
    SampleRecorder,
    Startable,
)
from .pipeline_state import PipelineStateStore
from .run_lease import HeldLease, LeaseHolder, RunLeases
from .training_backend import (
    BackendCapabilities,
    Capability,
    InferenceEndpoint,
    StepMetricsSource,
    TrainingBackend,
    UnsupportedCapability,
)
from .trajectory_store import TrajectoryStore

__all__ = [
    "BackendCapabilities",
    "Capability",
    "ConfigRecorder",
    "HeldLease",
    "InferenceEndpoint",
    "LeaseHolder",
    "MetricsHistory",
    "MetricsReporter",
    "PipelineStateStore",
    "RunLeases",
    "SampleRecorder",
    "Startable",
    "StepMetricsSource",
    "TrainingBackend",
    "TrajectoryStore",
    "UnsupportedCapability",
]
