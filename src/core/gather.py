"""Awaiting many groups of rollouts at once, with a progress line and a failure budget."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable

from .errors import InvalidInputError, TooManyExceptionsError
from .progress import ProgressLine
from .trajectories import CapturedException, TrajectoryGroup


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
    """The first failure in input order, with where it was raised: its traceback as the
    rollout recorded it (the exception object itself stays with the group's entry)."""
    for index in sorted(results):
        for error in results[index].exceptions:
            where = error.traceback.rstrip() or "(no traceback recorded)"
            return f"{error.type}: {error.message} (group {index})\n{where}"
    return "none"
