"""Training on another machine: `ServerlessBackend` (the client) and the training server it
talks to (`arthex.apps.server.main`). Importing this package imports neither httpx
nor fastapi; the client imports httpx when it first sends a request."""

from .client import JobEvent, ServerlessBackend
from .errors import ModelBusyError, QuotaExceededError, ServerlessAuthError, TrainingJobFailed

__all__ = [
    "JobEvent",
    "ModelBusyError",
    "QuotaExceededError",
    "ServerlessAuthError",
    "ServerlessBackend",
    "TrainingJobFailed",
]
