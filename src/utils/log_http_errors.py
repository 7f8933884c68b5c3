"""One line for an HTTP error from an async call, under ART's name (`art.utils.log_http_errors`).

`@log_http_errors` on an async function turns an `httpx.HTTPStatusError` it raises into
`arthex.BackendError("[HTTP {status}] {url} {detail}")`, chained to the original, where
`detail` is the JSON body's `"detail"` (FastAPI's error field). A body that is not a JSON
object is not reworded: the original error propagates. A JSON body without `"detail"` gives
its OpenAI-shaped `error.message` if it has one (ART writes "None" there).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, ParamSpec, TypeVar

import httpx

from ..core.errors import BackendError

__all__ = ["log_http_errors"]

P = ParamSpec("P")
R = TypeVar("R")


def _detail(error: httpx.HTTPStatusError) -> str | None:
    """What the body says went wrong; None when the body is not a JSON object."""
    try:
        payload = error.response.json()
    except ValueError:
        return None
    if not isinstance(payload, Mapping):
        return None
    detail = payload.get("detail")
    if detail is None:
        error_body = payload.get("error")
        detail = error_body.get("message") if isinstance(error_body, Mapping) else None
    return "" if detail is None else str(detail)


def log_http_errors(
    func: Callable[P, Coroutine[Any, Any, R]],
) -> Callable[P, Coroutine[Any, Any, R]]:
    """Reword an `httpx.HTTPStatusError` from `func` as one line (see the module)."""

    @functools.wraps(func)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await func(*args, **kwargs)
        except httpx.HTTPStatusError as error:
            detail = _detail(error)
            if detail is None:
                raise
            line = f"[HTTP {error.response.status_code}] {error.request.url} {detail}"
            raise BackendError(line.rstrip()) from error

    return wrapper
