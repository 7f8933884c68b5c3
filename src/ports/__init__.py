"""The ports the core depends on: the three roles (store, history, backend) and the run lease.
Protocols only, no implementation."""

from .metrics_reporter import (
    ConfigRecorder,
    MetricsHistory,
    MetricsReporter,
    SampleRecorder,
    Startable,
)
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
    "RunLeases",
    "SampleRecorder",
    "Startable",
    "StepMetricsSource",
    "TrainingBackend",
    "TrajectoryStore",
    "UnsupportedCapability",
]
