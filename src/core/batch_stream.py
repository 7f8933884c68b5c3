"""Training batches from a stream of groups, filled as the groups finish."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Iterable

from .errors import InvalidInputError, TooManyExceptionsError
from .gather import check_budget, first_error, too_many, warn_completion_tokens_flag
from .progress import ProgressLine
from .trajectories import CapturedException, TrajectoryGroup


def _positive(value: object, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


async def _settle(group: Awaitable[TrajectoryGroup]) -> TrajectoryGroup:
    try:
        return await group
    except Exception as error:  # kept as one exception entry, as gather_trajectory_groups does
        return TrajectoryGroup(exceptions=[CapturedException.from_exception(error)])


async def trajectory_group_batches(
    groups: Iterable[Awaitable[TrajectoryGroup]],
    *,
    batch_size: int,
    max_batch_exceptions: int | float = 0,
    max_concurrent_batches: int = 4,
    skip_batches: int = 0,
    pbar_desc: str | None = "batches",
    pbar_total_completion_tokens: bool = False,
    progress: bool | None = None,
) -> AsyncGenerator[list[TrajectoryGroup], None]:
    """Yield lists of `batch_size` groups in the order they finish (the last may be short).

    At most `batch_size * max_concurrent_batches` groups run at once, so rollouts for the
    next batches are under way while the caller trains on this one. The first
    `batch_size * skip_batches` groups are never started (resume after `skip_batches`
    trained batches). Failed rollouts count against `max_batch_exceptions` per batch (a
    count, or a fraction of the batch's rollouts); past it, TooManyExceptionsError. As in
    `gather_trajectory_groups`, a group whose awaitable raised is kept as an exception entry.
    """
    _positive(batch_size, "batch_size", 1)
    _positive(max_concurrent_batches, "max_concurrent_batches", 1)
    _positive(skip_batches, "skip_batches", 0)
    check_budget(max_batch_exceptions, "max_batch_exceptions")
    warn_completion_tokens_flag(pbar_total_completion_tokens)
    waiting = list(groups)
    for skipped in waiting[: batch_size * skip_batches]:
        if hasattr(skipped, "close"):  # a coroutine never started: no "never awaited" warning
            skipped.close()
    waiting = waiting[batch_size * skip_batches :][::-1]  # pop() from the end takes the next
    running: set[asyncio.Future[TrajectoryGroup]] = set()
    finished: list[TrajectoryGroup] = []
    try:
        while waiting or running or finished:
            bar = ProgressLine(pbar_desc or "", batch_size, enabled=progress)
            try:
                while len(finished) < batch_size and (waiting or running):
                    while waiting and len(running) < batch_size * max_concurrent_batches:
                        running.add(asyncio.ensure_future(_settle(waiting.pop())))
                    done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        group = task.result()
                        finished.append(group)
                        bar.advance(1, len(group.exceptions))
            finally:
                bar.close()
            batch, finished = finished[:batch_size], finished[batch_size:]
            _check_batch(batch, max_batch_exceptions)
            yield batch
    finally:
        for task in running:
            task.cancel()
        for never_started in waiting:
            if hasattr(never_started, "close"):
                with contextlib.suppress(Exception):
                    never_started.close()


def _check_batch(batch: list[TrajectoryGroup], max_exceptions: int | float) -> None:
    failed = sum(len(group.exceptions) for group in batch)
    total = failed + sum(len(group.trajectories) for group in batch)
    if failed and too_many(failed, total, max_exceptions):
        raise TooManyExceptionsError(
            f"{failed} of {total} rollouts in a batch failed, more than "
            f"max_batch_exceptions={max_exceptions}; first: "
            f"{first_error(dict(enumerate(batch)))}"
        )
