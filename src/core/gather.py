"""Awaiting many rollouts or groups at once, with a progress line and a failure budget."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Literal, overload

from .errors import InvalidInputError, TooManyExceptionsError
from .progress import ProgressLine
from .trajectories import CapturedException, Trajectory, TrajectoryGroup
from .watchdog import WATCHDOG

AfterEach = Callable[[TrajectoryGroup], Awaitable[TrajectoryGroup | list[TrajectoryGroup] | None]]


def check_budget(max_exceptions: int | float, what: str = "max_exceptions") -> None:
    if isinstance(max_exceptions, bool) or not isinstance(max_exceptions, int | float):
        raise InvalidInputError(f"{what} must be an int or a fraction, got {max_exceptions!r}")
    if max_exceptions < 0 or (
        isinstance(max_exceptions, float)
        and max_exceptions >= 1
        and not max_exceptions.is_integer()
    ):
        raise InvalidInputError(
            f"{what} must be a count >= 0 or a fraction in (0, 1), got {max_exceptions!r}"
        )


def too_many(failed: int, total: int, max_exceptions: int | float) -> bool:
    if 0 < max_exceptions < 1:
        return total > 0 and failed / total > max_exceptions
    return failed > max_exceptions


def warn_completion_tokens_flag(flag: bool) -> None:
    if flag:
        warnings.warn(
            "pbar_total_completion_tokens has no effect (ART deprecated it too); each "
            "trajectory's completion tokens are in its Choices' usage",
            DeprecationWarning,
            stacklevel=3,
        )


class RunningMetrics:
    """Sums and counts of the reward and the trajectory metrics seen so far, whose means
    make the progress line's note (ART's gather shows the same postfix). `max_metrics` caps
    how many are shown. Code running inside the gather (a rollout) reaches them with
    `running_metrics()` and may add its own; a mean divides by at least 1."""

    def __init__(self, max_metrics: int | None, max_exceptions: int | float = 0) -> None:
        if max_metrics is not None and (
            isinstance(max_metrics, bool) or not isinstance(max_metrics, int) or max_metrics < 0
        ):
            raise InvalidInputError(f"max_metrics must be None or an int >= 0, got {max_metrics!r}")
        self.max_metrics = max_metrics
        self.max_exceptions = max_exceptions
        self.sums: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()

    def add(self, trajectories: Iterable[Trajectory]) -> None:
        for trajectory in trajectories:
            for key, value in {"reward": trajectory.reward, **trajectory.metrics}.items():
                # a Counter adds floats at runtime; typeshed types its counts as int
                self.sums[key] += float(value)  # type: ignore[assignment]
                self.counts[key] += 1

    def means(self) -> dict[str, float]:
        keys = list(self.sums)[: self.max_metrics]
        return {key: self.sums[key] / max(1, self.counts[key]) for key in keys}

    def note(self) -> str:
        return " ".join(f"{key}={mean:.3g}" for key, mean in self.means().items())


_RUNNING: contextvars.ContextVar[RunningMetrics | None] = contextvars.ContextVar(
    "arthex_running_gather", default=None
)


def running_metrics() -> RunningMetrics | None:
    """The running metrics of the `gather_trajectory_groups` this code runs inside (None
    outside one, or inside `outside_gather()`)."""
    return _RUNNING.get()


@contextlib.contextmanager
def _running(metrics: RunningMetrics | None) -> Iterator[None]:
    token = _RUNNING.set(metrics)
    try:
        yield
    finally:
        _RUNNING.reset(token)


def outside_gather() -> contextlib.AbstractContextManager[None]:
    """Within the block, `running_metrics()` is None: for code that keeps its own tally
    inside a rollout."""
    return _running(None)


async def gather_trajectory_groups(
    groups: Iterable[Awaitable[TrajectoryGroup]],
    *,
    pbar_desc: str | None = "gather",
    pbar_total_completion_tokens: bool = False,
    max_exceptions: int | float = 0,
    max_metrics: int | None = None,
    after_each: AfterEach | None = None,
    progress: bool | None = None,
) -> list[TrajectoryGroup]:
    """Await every group concurrently and return them in input order.

    A rollout that failed is an exception entry of its group; a group whose awaitable itself
    raised is kept as a group holding that one exception (ART drops it; arthex never drops a
    failure silently). Failures are counted over all rollouts: `max_exceptions` is a count
    (0 = none allowed) or, when between 0 and 1, a fraction of all rollouts. Past it, the
    remaining work is cancelled and TooManyExceptionsError is raised.

    `after_each(group)` runs on each group as soon as it is gathered, concurrently with the
    rest (e.g. to score it with a judge): it returns the group to keep, a list of groups that
    take its place, or None to drop it. An exception from `after_each` propagates.
    `max_metrics` caps the running metric means on the progress line; a rollout (or
    `after_each`) adds its own to them through `running_metrics()`.
    """
    check_budget(max_exceptions)
    warn_completion_tokens_flag(pbar_total_completion_tokens)
    running = RunningMetrics(max_metrics, max_exceptions)
    awaitables = list(groups)

    async def settle(
        index: int, group: Awaitable[TrajectoryGroup]
    ) -> tuple[int, TrajectoryGroup, list[TrajectoryGroup]]:
        try:
            gathered = await group
        except Exception as error:  # the group coroutine itself failed: keep it as one entry
            gathered = TrajectoryGroup(exceptions=[CapturedException.from_exception(error)])
        if after_each is None:
            return index, gathered, [gathered]
        replaced = await after_each(gathered)
        kept = [] if replaced is None else replaced if isinstance(replaced, list) else [replaced]
        return index, gathered, kept

    with _running(running):  # the tasks copy the context as they are made
        tasks = [asyncio.ensure_future(settle(i, g)) for i, g in enumerate(awaitables)]
    bar = ProgressLine(pbar_desc or "", len(tasks), enabled=progress)
    gathered: dict[int, TrajectoryGroup] = {}  # as the rollouts left them: the budget's count
    kept: dict[int, list[TrajectoryGroup]] = {}  # after `after_each`: what is returned
    try:
        with WATCHDOG.activity("gather"):
            await _each_group(tasks, gathered, kept, running, bar, max_exceptions)
    finally:
        for task in tasks:
            task.cancel()
        bar.close()
    return [group for i in range(len(tasks)) for group in kept[i]]


async def _each_group(
    tasks: Sequence[asyncio.Future[tuple[int, TrajectoryGroup, list[TrajectoryGroup]]]],
    gathered: dict[int, TrajectoryGroup],
    kept: dict[int, list[TrajectoryGroup]],
    running: RunningMetrics,
    bar: ProgressLine,
    max_exceptions: int | float,
) -> None:
    """Collect the groups as they finish, within the failure budget."""
    failed = total = 0
    fraction = 0 < max_exceptions < 1
    for finished in asyncio.as_completed(tasks):
        index, group, replacements = await finished
        WATCHDOG.beat()
        gathered[index], kept[index] = group, replacements
        failed += len(group.exceptions)
        total += len(group.trajectories) + len(group.exceptions)
        running.add(group.trajectories)
        bar.advance(1, len(group.exceptions), note=running.note())
        if not fraction and too_many(failed, total, max_exceptions):
            raise TooManyExceptionsError(
                f"{failed} rollouts failed, more than max_exceptions={max_exceptions}; "
                f"first: {first_error(gathered)}"
            )
    if fraction and too_many(failed, total, max_exceptions):
        raise TooManyExceptionsError(
            f"{failed} of {total} rollouts failed, more than max_exceptions={max_exceptions}; "
            f"first: {first_error(gathered)}"
        )


def first_error(groups: dict[int, TrajectoryGroup]) -> str:
    """The first failure in input order, with where it was raised: its traceback as the
    rollout recorded it (the exception object itself stays with the group's entry)."""
    for index in sorted(groups):
        for error in groups[index].exceptions:
            where = error.traceback.rstrip() or "(no traceback recorded)"
            return f"{error.type}: {error.message} (group {index})\n{where}"
    return "none"


@overload
async def gather_trajectories(
    trajectories: Iterable[Awaitable[Trajectory]],
    *,
    pbar_desc: str | None = "gather",
    pbar_total_completion_tokens: bool = False,
    max_exceptions: Literal[0] = 0,
    progress: bool | None = None,
) -> list[Trajectory]: ...


@overload
async def gather_trajectories(
    trajectories: Iterable[Awaitable[Trajectory]],
    *,
    pbar_desc: str | None = "gather",
    pbar_total_completion_tokens: bool = False,
    max_exceptions: int | float,
    progress: bool | None = None,
) -> list[Trajectory | BaseException]: ...


@overload
async def gather_trajectories(
    trajectories: Iterable[Awaitable[Iterable[Trajectory]]],
    *,
    pbar_desc: str | None = "gather",
    pbar_total_completion_tokens: bool = False,
    max_exceptions: Literal[0] = 0,
    progress: bool | None = None,
) -> list[list[Trajectory]]: ...


@overload
async def gather_trajectories(
    trajectories: Iterable[Awaitable[Iterable[Trajectory]]],
    *,
    pbar_desc: str | None = "gather",
    pbar_total_completion_tokens: bool = False,
    max_exceptions: int | float,
    progress: bool | None = None,
) -> list[list[Trajectory] | BaseException]: ...


async def gather_trajectories(
    trajectories: Iterable[Awaitable[Trajectory]] | Iterable[Awaitable[Iterable[Trajectory]]],
    *,
    pbar_desc: str | None = "gather",
    pbar_total_completion_tokens: bool = False,
    max_exceptions: int | float = 0,
    progress: bool | None = None,
) -> Sequence[Trajectory | list[Trajectory] | BaseException]:
    """Await rollouts (each giving a Trajectory, or an iterable of them) concurrently and
    return the results in input order; a rollout that raised is returned as its exception
    while the failures stay within `max_exceptions` (a count, or a fraction of all rollouts).
    Past it, the rest is cancelled and TooManyExceptionsError is raised from the failure
    (ART re-raises the rollout's own exception; arthex's gathers all raise one error type).
    """
    check_budget(max_exceptions)
    warn_completion_tokens_flag(pbar_total_completion_tokens)
    awaitables = list(trajectories)

    async def settle(index: int, rollout: Awaitable[object]) -> tuple[int, object]:
        try:
            return index, await rollout
        except Exception as error:
            return index, error

    tasks = [asyncio.ensure_future(settle(i, a)) for i, a in enumerate(awaitables)]
    bar = ProgressLine(pbar_desc or "", len(tasks), enabled=progress)
    results: dict[int, Trajectory | list[Trajectory] | BaseException] = {}
    failed = 0
    try:
        for finished in asyncio.as_completed(tasks):
            with WATCHDOG.activity("gather"):
                index, outcome = await finished
            results[index] = _as_result(outcome)
            if not isinstance(outcome, BaseException):
                bar.advance(1)
                continue
            failed += 1
            bar.advance(1, 1)
            if too_many(failed, len(tasks), max_exceptions):  # the total is known up front
                raise TooManyExceptionsError(
                    f"{failed} of {len(tasks)} rollouts failed, more than "
                    f"max_exceptions={max_exceptions}; rollout {index}: "
                    f"{type(outcome).__name__}: {outcome}"
                ) from outcome
    finally:
        for task in tasks:
            task.cancel()
        bar.close()
    return [results[i] for i in range(len(tasks))]


def _as_result(outcome: object) -> Trajectory | list[Trajectory] | BaseException:
    if isinstance(outcome, Trajectory | BaseException):
        return outcome
    if isinstance(outcome, Iterable) and not isinstance(outcome, str | bytes | dict):
        items = list(outcome)
        if all(isinstance(item, Trajectory) for item in items):
            return items
    raise TypeError(
        f"a rollout returned {type(outcome).__name__}, expected a Trajectory or an iterable "
        "of Trajectory"
    )
