"""Calls to an object store, tried again with backoff until a time budget is spent.

Only failures that say the store is busy or unreachable are tried again: 5xx replies (503
SlowDown among them), 429, throttling, timeouts and broken or refused connections. A missing
key, a denied request or a bad credential fails at once. Each call is whole on its own terms
(a read of a fresh snapshot, a PUT of one object under a fixed key, a write that first checks
whether its earlier attempt already landed), so trying it again never stores anything twice.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import TypeVar

from ...core.errors import ArthexError, InvalidInputError, StoreUnavailableError

__all__ = ["DEFAULT_RETRY_BUDGET", "check_budget", "is_transient", "within_budget"]

R = TypeVar("R")

DEFAULT_RETRY_BUDGET = 60.0
"""Seconds one store call keeps trying while the object store is busy or down."""
_FIRST_WAIT = 0.05
_MAX_WAIT = 5.0

logger = logging.getLogger("arthex")

# How the AWS SDK under pyarrow words a failure worth trying again.
_TRANSIENT = re.compile(
    r"SLOW_DOWN|NETWORK_CONNECTION|SERVICE_UNAVAILABLE|INTERNAL_FAILURE|THROTTLING"
    r"|REQUEST_TIMEOUT|REQUEST_TIME_OUT|HTTP status (?:5[0-9][0-9]|429)|curlCode"
    r"|[Cc]onnection (?:reset|refused|aborted)|[Tt]imed? ?out"
)


def check_budget(budget: float) -> float:
    if isinstance(budget, bool) or not isinstance(budget, int | float) or not budget >= 0:
        raise InvalidInputError(f"retry_budget must be a number of seconds >= 0, got {budget!r}")
    return float(budget)


def is_transient(error: BaseException) -> bool:
    if isinstance(error, ArthexError) or not isinstance(error, OSError):
        return False
    if isinstance(error, FileNotFoundError | NotADirectoryError | IsADirectoryError):
        return False
    return _TRANSIENT.search(str(error)) is not None


def within_budget(what: str, call: Callable[[int], R], budget: float) -> R:
    """`call(attempt)` (1, 2, ...) until it returns, trying again after a transient store
    failure with doubling waits while `budget` seconds last; then StoreUnavailableError,
    one line naming `what` (the operation and its s3://bucket/key) and the budget."""
    deadline = time.monotonic() + budget
    wait = _FIRST_WAIT
    attempt = 0
    while True:
        attempt += 1
        try:
            return call(attempt)
        except OSError as error:
            if not is_transient(error):
                raise
            left = deadline - time.monotonic()
            last = " ".join(str(error).split())[:200]
            if left <= 0:
                raise StoreUnavailableError(
                    f"{what} failed: the object store kept failing for the whole "
                    f"{budget:g} s retry budget ({attempt} attempt{'s' * (attempt != 1)}, "
                    f"last: {last}); call again once it answers, or give the store a larger "
                    "retry_budget="
                ) from error
            logger.warning("object store busy or down, trying %s again: %s", what, last)
            time.sleep(min(wait, left))
            wait = min(wait * 2, _MAX_WAIT)
