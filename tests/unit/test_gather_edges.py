"""Edges of gathering rollouts and streaming batches that mutation testing found unguarded:
what the progress line shows, how many groups run at once, what a refusal says word for word,
and coroutines that are never started being closed."""

from __future__ import annotations

import asyncio
import inspect
import warnings
from collections.abc import Coroutine, Generator
from typing import Any

import pytest

from arthex.core.batch_stream import trajectory_group_batches
from arthex.core.errors import InvalidInputError, TooManyExceptionsError
from arthex.core.gather import (
    RunningMetrics,
    first_error,
    gather_trajectories,
    gather_trajectory_groups,
)
from arthex.core.trajectories import CapturedException, Trajectory, TrajectoryGroup
from tests._progress import frames


async def ready(ok: int, bad: int = 0, **metrics: float) -> TrajectoryGroup:
    good = [Trajectory(reward=float(i), metrics=dict(metrics)) for i in range(ok)]
    failures = [ValueError(f"bad {i}") for i in range(bad)]
    return TrajectoryGroup([*good, *failures])


async def trajectory(reward: float) -> Trajectory:
    return Trajectory(reward=reward)


async def failing(message: str) -> Trajectory:
    raise ValueError(message)


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


def batches(groups: Any, **options: Any) -> list[list[TrajectoryGroup]]:
    async def main() -> list[list[TrajectoryGroup]]:
        return [batch async for batch in trajectory_group_batches(groups, **options)]

    result: list[list[TrajectoryGroup]] = run(main())
    return result


# --- gather_trajectory_groups ---------------------------------------------------------------


def test_the_gather_line_shows_the_default_name_counts_failures_and_metric_means(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(
        gather_trajectory_groups(
            [ready(2, m=1.0), ready(2, 1, m=3.0)], max_exceptions=1, progress=True
        )
    )
    shown = frames(capsys.readouterr().err)
    assert [line for line, _ in shown] == [
        "gather [############............] 1/2 failed=0",
        "gather [########################] 2/2 failed=1",
    ]
    # rewards 0, 1 then 0, 1; m 1, 1 then 3, 3
    assert [note for _, note in shown] == ["reward=0.5 m=1", "reward=0.5 m=2"]


def test_a_gather_without_a_name_shows_only_the_bar(capsys: pytest.CaptureFixture[str]) -> None:
    run(gather_trajectory_groups([ready(1)], pbar_desc=None, progress=True))
    assert frames(capsys.readouterr().err) == [
        (" [########################] 1/1 failed=0", "reward=0")
    ]


def test_no_metric_is_shown_with_max_metrics_zero(capsys: pytest.CaptureFixture[str]) -> None:
    run(gather_trajectory_groups([ready(1, m=1.0)], max_metrics=0, progress=True))
    assert frames(capsys.readouterr().err) == [
        ("gather [########################] 1/1 failed=0", "")
    ]
    for bad in (True, -1, 1.5):
        with pytest.raises(InvalidInputError) as caught:
            RunningMetrics(bad)  # type: ignore[arg-type]
        assert str(caught.value) == f"max_metrics must be None or an int >= 0, got {bad!r}"


def test_a_count_of_zero_fails_at_the_first_failure_with_the_count_message() -> None:
    with pytest.raises(TooManyExceptionsError) as caught:
        run(gather_trajectory_groups([ready(1, 1)]))
    # The error was never raised, so its recorded traceback is its last line alone.
    assert str(caught.value) == (
        "1 rollouts failed, more than max_exceptions=0; first: ValueError: bad 0 (group 0)\n"
        "ValueError: bad 0"
    )


@pytest.mark.parametrize("budget", [1, 1.0])
def test_a_budget_of_one_is_a_count_not_a_fraction(budget: float) -> None:
    with pytest.raises(TooManyExceptionsError, match=r"^2 rollouts failed, more than "):
        run(gather_trajectory_groups([ready(0, 2)], max_exceptions=budget))


def test_a_fraction_applies_to_a_single_rollout_and_to_nothing_at_all() -> None:
    with pytest.raises(TooManyExceptionsError, match=r"^1 of 1 rollouts failed"):
        run(gather_trajectory_groups([ready(0, 1)], max_exceptions=0.5))
    assert run(gather_trajectory_groups([], max_exceptions=0.5)) == []
    assert run(gather_trajectory_groups([ready(0)], max_exceptions=0.5)) == [TrajectoryGroup([])]


def test_the_first_error_without_a_traceback_says_so() -> None:
    group = TrajectoryGroup(
        exceptions=[CapturedException(type="x.Boom", message="boom", traceback="")]
    )
    assert first_error({3: TrajectoryGroup([]), 4: group}) == (
        "x.Boom: boom (group 4)\n(no traceback recorded)"
    )
    assert first_error({0: TrajectoryGroup([])}) == "none"


def warn_from_both_gathers() -> list[warnings.WarningMessage]:
    async def main() -> None:
        await gather_trajectory_groups([], pbar_total_completion_tokens=True)
        await gather_trajectories([], pbar_total_completion_tokens=True)

    with pytest.warns(DeprecationWarning, match="pbar_total_completion_tokens") as caught:
        run(main())
    return list(caught)


def test_both_gathers_say_the_completion_tokens_flag_has_no_effect() -> None:
    assert [str(w.message) for w in warn_from_both_gathers()] == [
        "pbar_total_completion_tokens has no effect (ART deprecated it too); each "
        "trajectory's completion tokens are in its Choices' usage"
    ] * 2


def test_the_completion_tokens_flag_warns_from_the_callers_line() -> None:
    caught = warn_from_both_gathers()
    assert len(caught) == 2 and {w.filename for w in caught} == {__file__}


def test_nothing_warns_by_default() -> None:
    async def main() -> None:
        await gather_trajectory_groups([ready(1)])
        await gather_trajectories([trajectory(1.0)])
        async for _ in trajectory_group_batches([ready(1)], batch_size=1):
            pass

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(main())


# --- gather_trajectories --------------------------------------------------------------------


def test_the_trajectories_line_counts_rollouts_and_failures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    found = run(
        gather_trajectories(
            [trajectory(1.0), failing("no"), trajectory(2.0)], max_exceptions=1, progress=True
        )
    )
    assert isinstance(found[1], ValueError)
    shown = frames(capsys.readouterr().err)
    assert shown[-1] == ("gather [########################] 3/3 failed=1", "")
    assert [line.split("] ")[1] for line, _ in shown] == [
        "1/3 failed=0",
        "2/3 failed=1",
        "3/3 failed=1",
    ]
    run(gather_trajectories([trajectory(1.0)], pbar_desc=None, progress=True))
    assert frames(capsys.readouterr().err) == [(" [########################] 1/1 failed=0", "")]


def test_two_failed_rollouts_exceed_a_budget_of_one() -> None:
    with pytest.raises(TooManyExceptionsError) as caught:
        run(gather_trajectories([failing("a"), trajectory(1.0), failing("b")], max_exceptions=1))
    assert str(caught.value) == (
        "2 of 3 rollouts failed, more than max_exceptions=1; rollout 2: ValueError: b"
    )


def test_a_rollout_that_returns_a_number_is_named() -> None:
    async def number() -> object:
        return 5

    with pytest.raises(TypeError) as caught:
        run(gather_trajectories([number()]))  # type: ignore[list-item]
    assert str(caught.value) == (
        "a rollout returned int, expected a Trajectory or an iterable of Trajectory"
    )


# --- trajectory_group_batches ---------------------------------------------------------------


def test_the_default_concurrency_is_four_batches_and_groups_start_in_order() -> None:
    started: list[int] = []
    running = [0, 0]  # now, peak

    async def group(i: int) -> TrajectoryGroup:
        started.append(i)
        running[0] += 1
        running[1] = max(running[1], running[0])
        for _ in range(3):
            await asyncio.sleep(0)
        running[0] -= 1
        return TrajectoryGroup([Trajectory(reward=float(i))])

    found = batches([group(i) for i in range(20)], batch_size=2)
    assert running[1] == 8  # batch_size * 4
    assert started == list(range(20))
    assert sorted(int(g.trajectories[0].reward) for b in found for g in b) == list(range(20))
    started.clear()
    running[1] = 0
    batches([group(i) for i in range(5)], batch_size=2, max_concurrent_batches=1)
    assert running[1] == 2 and started == list(range(5))


def test_groups_finished_together_all_reach_a_batch() -> None:
    found = batches([ready(1) for _ in range(5)], batch_size=2)
    assert [len(batch) for batch in found] == [2, 2, 1]


def test_a_batch_is_yielded_as_soon_as_it_is_full() -> None:
    # The second group finishes only once the caller has the first batch: waiting for more
    # than a batch (or for every running group) would never end.
    got_first = asyncio.Event()

    async def second() -> TrajectoryGroup:
        await got_first.wait()
        return TrajectoryGroup([Trajectory(reward=2.0)])

    async def main() -> list[int]:
        sizes = []
        async for batch in trajectory_group_batches([ready(1), second()], batch_size=1):
            sizes.append(len(batch))
            got_first.set()
        return sizes

    assert run(asyncio.wait_for(main(), timeout=60)) == [1, 1]


def test_the_batches_line_counts_groups_and_failures_per_batch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    batches([ready(1, 1), ready(2)], batch_size=2, max_batch_exceptions=1, progress=True)
    shown = [line for line, _ in frames(capsys.readouterr().err)]
    assert shown[-1] == "batches [########################] 2/2 failed=1"
    assert len(shown) == 2
    batches([ready(1)], batch_size=1, pbar_desc=None, progress=True)
    assert frames(capsys.readouterr().err) == [(" [########################] 1/1 failed=0", "")]


def test_a_group_that_raised_is_kept_as_its_exception() -> None:
    async def broken() -> TrajectoryGroup:
        raise KeyError("scenario 7")

    ((group,),) = batches([broken()], batch_size=1, max_batch_exceptions=1)
    (error,) = group.exceptions
    assert (error.type, error.message) == ("KeyError", "'scenario 7'")


def test_a_batch_over_its_budget_gives_the_whole_message() -> None:
    with pytest.raises(TooManyExceptionsError) as caught:
        batches([ready(2, 1)], batch_size=1, max_batch_exceptions=0.25)
    assert str(caught.value) == (
        "1 of 3 rollouts in a batch failed, more than max_batch_exceptions=0.25; first: "
        "ValueError: bad 0 (group 0)\nValueError: bad 0"
    )
    assert len(batches([ready(3, 1)], batch_size=1, max_batch_exceptions=0.25)) == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"batch_size": True}, "batch_size must be an integer >= 1, got True"),
        ({"batch_size": 1.0}, "batch_size must be an integer >= 1, got 1.0"),
        ({"max_concurrent_batches": 0}, "max_concurrent_batches must be an integer >= 1, got 0"),
        ({"skip_batches": -1}, "skip_batches must be an integer >= 0, got -1"),
        (
            {"max_batch_exceptions": -1},
            "max_batch_exceptions must be a count >= 0 or a fraction in (0, 1), got -1",
        ),
    ],
)
def test_bad_batch_options_give_their_whole_message(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        batches([], **{"batch_size": 1, **options})
    assert str(caught.value) == message


def test_one_batch_at_a_time_is_allowed() -> None:
    assert len(batches([ready(1)], batch_size=1, max_concurrent_batches=1)) == 1


class Closing:
    """An awaitable that records being closed unstarted; its close may raise."""

    def __init__(self, fail: bool = False) -> None:
        self.closed = False
        self.fail = fail

    def __await__(self) -> Generator[Any, None, TrajectoryGroup]:
        return ready(1).__await__()

    def close(self) -> None:
        self.closed = True
        if self.fail:
            raise RuntimeError("close failed")


def test_skipped_and_abandoned_groups_are_closed_without_running() -> None:
    skipped = [ready(1), ready(1)]
    later = [Closing(), Closing(fail=True)]

    async def main() -> None:
        stream = trajectory_group_batches(
            [*skipped, ready(1), *later], batch_size=1, max_concurrent_batches=1, skip_batches=2
        )
        await anext(stream)
        await stream.aclose()  # the caller stops early: the rest never starts

    run(main())
    assert [inspect.getcoroutinestate(c) for c in skipped] == [inspect.CORO_CLOSED] * 2
    assert [c.closed for c in later] == [True, True]
