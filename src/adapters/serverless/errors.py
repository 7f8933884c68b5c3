"""Errors of the serverless client and server, beyond the core ones they reuse
(InvalidInputError for 400/413/422, NotRegisteredError for 404, UnsupportedCapability)."""

from __future__ import annotations

from ...core.errors import BackendError


class ServerlessAuthError(BackendError, PermissionError):
    """The server refused the API key (HTTP 401)."""


class ModelBusyError(BackendError):
    """The model is training: one job per model runs at a time (HTTP 409)."""


class TrainingJobFailed(BackendError):
    """A training job ended with `training_failed`; the message is the server's."""

    def __init__(self, job_id: str, message: str, error_type: str = "") -> None:
        self.job_id = job_id
        self.error_type = error_type
        super().__init__(f"training job {job_id} failed: {message}")
