"""The ports the core depends on. Protocols only, no implementation."""

from .metrics_reporter import ConfigRecorder, MetricsHistory, MetricsReporter, SampleRecorder
from .pipeline_state import PipelineStateStore
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
    "InferenceEndpoint",
    "MetricsHistory",
    "MetricsReporter",
    "PipelineStateStore",
    "SampleRecorder",
    "StepMetricsSource",
    "TrainingBackend",
    "TrajectoryStore",
    "UnsupportedCapability",
]
