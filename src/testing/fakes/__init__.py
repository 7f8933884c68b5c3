"""In-memory stand-ins for the ports, verified by the same contract kits as the real adapters."""

from .backend import InMemoryBackend
from .history import InMemoryHistory
from .leases import InMemoryLease, InMemoryRunLeases
from .pipeline_state import InMemoryPipelineStateStore
from .stores import InMemoryTrajectoryStore

__all__ = [
    "InMemoryBackend",
    "InMemoryHistory",
    "InMemoryLease",
    "InMemoryPipelineStateStore",
    "InMemoryRunLeases",
    "InMemoryTrajectoryStore",
]
