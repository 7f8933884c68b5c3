"""`retry`: call a function again when it raises, waiting longer each time (sync or async)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar, cast

from ..core.errors import InvalidInputError

P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger("arthex")

ExceptionTypes = type[BaseException] | tuple[type[BaseException], ...]


def _check(max_attempts: int, delay: float, backoff_factor: float) -> None:
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise InvalidInputError(f"max_attempts must be an integer >= 1, got {max_attempts!r}")
    for name, value in (("delay", delay), ("backoff_factor", backoff_factor)):
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise InvalidInputError(f"{name} must be a number >= 0, got {value!r}")


def retry(
    max_attempts: int = 3,
    delay: float = 0.25,
    backoff_factor: float = 2.0,
    exceptions: ExceptionTypes = (Exception,),
    on_retry: Callable[[Exception, int], None] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function (or coroutine function) to try it up to `max_attempts` times.

    After failed attempt `k` (an exception matching `exceptions`, a class or a tuple of
    classes) it calls `on_retry(error, k)` (or logs a warning), waits `delay *
    backoff_factor ** (k - 1)` seconds and tries again; the last attempt's exception
    propagates. Other exceptions propagate at once. Same parameters and meaning as ART's
    `art.retry`; the arguments are checked when the decorator is made.
    """
    _check(max_attempts, delay, backoff_factor)

    def report(error: Exception, attempt: int, name: str) -> None:
        if on_retry is not None:
            on_retry(error, attempt)
        else:
            logger.warning("retry %d/%d for %s after error: %s", attempt, max_attempts, name, error)

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        name = getattr(func, "__qualname__", repr(func))
        if inspect.iscoroutinefunction(func):
            call_async = cast(Callable[P, Awaitable[Any]], func)

            @functools.wraps(func)
            async def retrying_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                wait = float(delay)
                for attempt in range(1, max_attempts + 1):
                    try:
                        return await call_async(*args, **kwargs)
                    except exceptions as error:
                        if attempt == max_attempts or not isinstance(error, Exception):
                            raise
                        report(error, attempt, name)
                    await asyncio.sleep(wait)
                    wait *= backoff_factor
                raise AssertionError("unreachable: the last attempt returns or raises")

            return cast(Callable[P, R], retrying_async)

        @functools.wraps(func)
        def retrying(*args: P.args, **kwargs: P.kwargs) -> R:
            wait = float(delay)
            for attempt in range(1, max_attempts + 1):
                try:
                    return func(*args, **kwargs)
                except exceptions as error:
                    if attempt == max_attempts or not isinstance(error, Exception):
                        raise
                    report(error, attempt, name)
                time.sleep(wait)
                wait *= backoff_factor
            raise AssertionError("unreachable: the last attempt returns or raises")

        return retrying

    return decorate
