"""Errors of the serverless client and server, beyond the core ones they reuse
(InvalidInputError for 400/413/422, NotRegisteredError for 404, UnsupportedCapability,
RunBusyError for a model another trainer holds)."""

from __future__ import annotations

from ...core.errors import BackendError


class ServerlessAuthError(BackendError, PermissionError):
    """The server refused the API key (HTTP 401)."""


class ModelBusyError(BackendError):
    """The model is training: one job per model runs at a time (HTTP 409)."""


class QuotaExceededError(BackendError):
    """A tenant quota of the server is used up (HTTP 429 `insufficient_quota` for models and
    jobs, 507 for checkpoint storage). Waiting does not help: free some (end a job, delete
    checkpoints) or ask the server's operator for more."""

    def __init__(self, message: str, status: int = 429) -> None:
        super().__init__(message)
        self.status = status


class TrainingJobFailed(BackendError):
    """A training job ended with `training_failed`; the message is the server's."""

    def __init__(self, job_id: str, message: str, error_type: str = "") -> None:
        self.job_id = job_id
        self.error_type = error_type
        super().__init__(f"training job {job_id} failed: {message}")
