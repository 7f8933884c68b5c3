"""The serverless client's HTTP edges: the lazily imported httpx, one TLS context per
process, which answers are worth retrying, and the error each status becomes."""

from __future__ import annotations

import functools
import ssl
from typing import TYPE_CHECKING, Any

from ...core.errors import BackendError, MissingExtraError
from . import wire
from .errors import error_for

if TYPE_CHECKING:
    import httpx

__all__ = ["httpx_module", "raise_for_status", "retryable", "ssl_context", "transport_error"]

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


def httpx_module() -> Any:
    try:
        import httpx
    except ImportError as exc:
        raise MissingExtraError("httpx", "serverless") from exc
    return httpx


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """Made once per process: building one (loading the CA bundle) costs ~0.1 s, and every
    event loop needs a client of its own."""
    context: ssl.SSLContext = httpx_module().create_ssl_context()
    return context


def transport_error(method: str, path: str, exc: Exception, base_url: str) -> BackendError:
    note = " (a POST is not retried: the server may have acted on it)" if method == "POST" else ""
    return BackendError(
        f"{method} {path} could not reach the training server at {base_url}: "
        f"{type(exc).__name__}: {exc}{note}"
    )


def retryable(method: str, response: httpx.Response) -> bool:
    """A POST only when the server refused it unread (rate limit); others on any transient
    status."""
    if method != "POST":
        return response.status_code in RETRY_STATUSES
    if response.status_code != 429:
        return False
    try:
        payload: object = response.json()
    except ValueError:
        return False
    return wire.error_message(payload)[1] == wire.RATE_LIMITED


def raise_for_status(method: str, path: str, response: httpx.Response) -> None:
    status = response.status_code
    if status < 400:
        return
    try:
        payload: object = response.json()
    except ValueError:
        payload = None
    message, kind, param = wire.error_message(payload)
    message = message or response.text[:500] or response.reason_phrase
    error = error_for(status, kind, message, param)
    if error is not None:
        raise error
    raise BackendError(f"{method} {path} failed with HTTP {status}: {message}")
