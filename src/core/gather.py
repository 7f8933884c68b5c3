"""Awaiting many groups of rollouts at once, with a progress line and a failure budget."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Iterable
from typing import TextIO

from .errors import InvalidInputError, TooManyExceptionsError
from .trajectories import CapturedException, TrajectoryGroup


class ProgressLine:
    """A one-line progress display on a terminal; silent when the stream is not a TTY."""

    def __init__(
        self,
        description: str,
        total: int,
        stream: TextIO | None = None,
        enabled: bool | None = None,
    ) -> None:
        self.description = description
        self.total = total
        self.done = 0
        self.failed = 0
        self._stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = bool(getattr(self._stream, "isatty", lambda: False)())
        self.enabled = enabled
        self._started = time.monotonic()

    def advance(self, done: int = 1, failed: int = 0) -> None:
        self.done += done
        self.failed += failed
        if self.enabled:
            width = 24
            filled = width * self.done // max(self.total, 1)
            elapsed = time.monotonic() - self._started
            self._stream.write(
                f"\r{self.description} [{'#' * filled}{'.' * (width - filled)}] "
                f"{self.done}/{self.total} failed={self.failed} {elapsed:5.1f}s"
            )
            self._stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._stream.write("\n")
            self._stream.flush()


def _check_budget(max_exceptions: int | float) -> None:
    if isinstance(max_exceptions, bool) or not isinstance(max_exceptions, int | float):
        raise InvalidInputError(
            f"max_exceptions must be an int or a fraction, got {max_exceptions!r}"
        )
    if max_exceptions < 0 or (
        isinstance(max_exceptions, float)
        and max_exceptions >= 1
        and not max_exceptions.is_integer()
    ):
        raise InvalidInputError(
            f"max_exceptions must be a count >= 0 or a fraction in (0, 1), got {max_exceptions!r}"
        )


def _too_many(failed: int, total: int, max_exceptions: int | float) -> bool:
    if 0 < max_exceptions < 1:
        return total > 0 and failed / total > max_exceptions
    return failed > max_exceptions


async def gather_trajectory_groups(
    groups: Iterable[Awaitable[TrajectoryGroup]],
    *,
    max_exceptions: int | float = 0,
    pbar_desc: str = "gather",
    progress: bool | None = None,
) -> list[TrajectoryGroup]:
    """Await every group concurrently and return them in input order.

    A rollout that failed is an exception entry of its group; a group whose awaitable itself
    raised is kept as a group holding that one exception (never dropped silently). Failures
    are counted over all rollouts: `max_exceptions` is a count (0 = none allowed) or, when
    between 0 and 1, a fraction of all rollouts. Past it, the remaining work is cancelled and
    TooManyExceptionsError is raised.
    """
    _check_budget(max_exceptions)
    awaitables = list(groups)

    async def settle(index: int, group: Awaitable[TrajectoryGroup]) -> tuple[int, TrajectoryGroup]:
        try:
            return index, await group
        except Exception as error:  # the group coroutine itself failed: keep it as one entry
            return index, TrajectoryGroup(exceptions=[CapturedException.from_exception(error)])

    tasks = [asyncio.ensure_future(settle(i, g)) for i, g in enumerate(awaitables)]
    bar = ProgressLine(pbar_desc, len(tasks), enabled=progress)
    results: dict[int, TrajectoryGroup] = {}
    failed = total = 0
    fraction = 0 < max_exceptions < 1
    try:
        for finished in asyncio.as_completed(tasks):
            index, group = await finished
            results[index] = group
            failed += len(group.exceptions)
            total += len(group.trajectories) + len(group.exceptions)
            bar.advance(1, len(group.exceptions))
            if not fraction and _too_many(failed, total, max_exceptions):
                raise TooManyExceptionsError(
                    f"{failed} rollouts failed, more than max_exceptions={max_exceptions}; "
                    f"first: {_first_error(results)}"
                )
        if fraction and _too_many(failed, total, max_exceptions):
            raise TooManyExceptionsError(
                f"{failed} of {total} rollouts failed, more than max_exceptions={max_exceptions}; "
                f"first: {_first_error(results)}"
            )
    finally:
        for task in tasks:
            task.cancel()
        bar.close()
    return [results[i] for i in range(len(tasks))]


def _first_error(results: dict[int, TrajectoryGroup]) -> str:
    for index in sorted(results):
        for error in results[index].exceptions:
            return f"{error.type}: {error.message}"
    return "none"
