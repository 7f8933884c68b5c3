"""Errors of the serverless client and server, beyond the core ones they reuse
(InvalidInputError for 400/413/422, NotRegisteredError for 404, UnsupportedCapability,
RunBusyError for a model another trainer holds), and the one table between errors and HTTP
answers that both ends read: the server answers an error with its row's status and type, the
client raises the row's error for a status (and type, where a status is shared)."""

from __future__ import annotations

from ...core.errors import (
    BackendError,
    InvalidInputError,
    NotRegisteredError,
    RunBusyError,
    UnsupportedCapability,
)
from . import wire


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


# (error, status, type), most specific first: the server answers with the first row whose
# error the exception is; the client raises the row whose status and type both match.
ERROR_TABLE: tuple[tuple[type[Exception], int, str], ...] = (
    (ModelBusyError, 409, wire.MODEL_BUSY),
    (RunBusyError, 409, wire.RUN_BUSY),
    (NotRegisteredError, 404, wire.NOT_FOUND),
    (UnsupportedCapability, 501, wire.UNSUPPORTED_CAPABILITY),
    (InvalidInputError, 422, wire.INVALID_REQUEST),
)
# An answer of these statuses with no type, or another one, still reads as the status's error.
_BY_STATUS_ALONE: dict[int, type[Exception]] = {
    404: NotRegisteredError,
    409: ModelBusyError,
    400: InvalidInputError,
    413: InvalidInputError,
    422: InvalidInputError,
}


def http_answer(exc: Exception) -> tuple[int, str, str | None] | None:
    """(status, type, param) the server answers `exc` with; None when no row names it."""
    if isinstance(exc, QuotaExceededError):
        kind = wire.STORAGE_EXCEEDED if exc.status == 507 else wire.QUOTA_EXCEEDED
        return exc.status, kind, None
    for error, status, kind in ERROR_TABLE:
        if isinstance(exc, error):
            param = exc.capability if isinstance(exc, UnsupportedCapability) else None
            return status, kind, param
    return None


def error_for(status: int, kind: str, message: str, param: str | None) -> Exception | None:
    """The error the client raises for an answer; None when the table has no row for it."""
    if status == 401:
        return ServerlessAuthError(
            f"the training server refused the API key ({message}); check ARTHEX_API_KEY"
        )
    if status == 507 or (status == 429 and kind == wire.QUOTA_EXCEEDED):
        return QuotaExceededError(message, status)
    for error, row_status, row_kind in ERROR_TABLE:
        if (row_status, row_kind) == (status, kind):
            if error is UnsupportedCapability:
                backend = "ServerlessBackend (the server's backend)"
                return UnsupportedCapability(param or "?", backend, message)
            return error(message)
    by_status = _BY_STATUS_ALONE.get(status)
    return None if by_status is None else by_status(message)
