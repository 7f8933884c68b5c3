"""`limit_concurrency`: at most `n` calls of a coroutine function run at once (per key)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from ..core.errors import InvalidInputError

P = ParamSpec("P")
R = TypeVar("R")


def limit_concurrency(
    n: int, derive_key: Callable[..., str] | None = None
) -> Callable[[Callable[P, Coroutine[Any, Any, R]]], Callable[P, Coroutine[Any, Any, R]]]:
    """Let at most `n` calls run at a time; with `derive_key(*args, **kwargs)`, at most `n`
    per key (one limit per judge model, per host, ...). Same meaning as ART's."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidInputError(f"n must be an integer >= 1, got {n!r}")

    def decorate(
        func: Callable[P, Coroutine[Any, Any, R]],
    ) -> Callable[P, Coroutine[Any, Any, R]]:
        limits: dict[str, asyncio.Semaphore] = {}

        @functools.wraps(func)
        async def limited(*args: P.args, **kwargs: P.kwargs) -> R:
            key = derive_key(*args, **kwargs) if derive_key is not None else "default"
            limit = limits.setdefault(key, asyncio.Semaphore(n))
            async with limit:
                return await func(*args, **kwargs)

        return limited

    return decorate
