"""The ways to open a capture scope (`core.capture.forms`) at their edges: a synchronous block
that raises, misuse refused with a message that says what to do, an async reward, a group's
own metadata, and a rollout stopped by a BaseException."""

from __future__ import annotations

import asyncio
import inspect

import pytest

import arthex
from arthex.core.capture.scope import ERROR_KEY
from arthex.core.errors import InvalidInputError
from arthex.core.trajectories import Trajectory


class Halt(BaseException):
    """What a rollout raises that is not an Exception (as KeyboardInterrupt or SystemExit)."""


async def answer() -> str:
    return "4"


def test_a_synchronous_block_that_raises_leaves_its_trajectory_flagged_incomplete() -> None:
    with (
        pytest.raises(ValueError, match="the tool broke"),
        arthex.capture(endpoints="any") as trajectory,
    ):
        raise ValueError("the tool broke")
    assert trajectory.incomplete
    assert trajectory.metadata[ERROR_KEY] == "ValueError: the tool broke"


def test_a_capture_entered_twice_says_to_make_a_new_one() -> None:
    scope = arthex.capture(endpoints="any")
    with scope:
        pass
    with (
        pytest.raises(
            InvalidInputError,
            match=r"^a capture\(\) is entered once; make a new one for each scope$",
        ),
        scope,
    ):
        pass


def test_a_capture_decorator_given_a_trajectory_says_not_to_pass_one() -> None:
    with pytest.raises(
        InvalidInputError,
        match=r"^a capture\(\) decorator makes a new trajectory per call; do not pass trajectory=$",
    ):
        arthex.capture(trajectory=Trajectory())(answer)


def test_capture_trajectory_refuses_a_future_by_name() -> None:
    async def main() -> None:
        future = asyncio.get_running_loop().create_future()
        with pytest.raises(
            InvalidInputError,
            match=r"^capture_trajectory takes un-awaited coroutines .* got Future",
        ):
            await arthex.capture_trajectory(future)  # type: ignore[arg-type]  # the misuse

    asyncio.run(main())


def test_a_group_given_a_task_refuses_it_by_name_and_closes_the_coroutines_beside_it() -> None:
    """None of the rollouts will run, so the coroutines are closed (no "never awaited")."""

    async def main() -> None:
        spare = answer()
        task = asyncio.ensure_future(answer())
        with pytest.raises(
            InvalidInputError, match=r"^capture_trajectory_group takes un-awaited .* got Task"
        ):
            _ = arthex.capture_trajectory_group([spare, task])  # type: ignore[list-item]
        assert inspect.getcoroutinestate(spare) == inspect.CORO_CLOSED
        assert await task == "4"

    asyncio.run(main())


def test_an_async_reward_is_awaited_and_becomes_the_reward() -> None:
    async def judge(result: str) -> float:
        await asyncio.sleep(0)
        return 0.75 if result == "4" else 0.0

    trajectory = asyncio.run(arthex.capture_trajectory(answer(), reward=judge))
    assert trajectory.reward == 0.75


def test_a_group_keeps_the_metadata_metrics_and_logs_it_was_given() -> None:
    group = asyncio.run(
        arthex.capture_trajectory_group(
            [answer(), answer()],
            metadata={"split": "val"},
            metrics={"difficulty": 2.0},
            logs=["seeded from scenario 7"],
        )
    )
    assert len(group.trajectories) == 2
    assert group.metadata == {"split": "val"}
    assert group.metrics == {"difficulty": 2.0}
    assert group.logs == ["seeded from scenario 7"]


def test_a_rollout_stopped_by_a_base_exception_leaves_its_trajectory_flagged_incomplete() -> None:
    seen: list[Trajectory] = []

    async def halts() -> None:
        trajectory = arthex.current_trajectory(require=True)
        assert trajectory is not None
        seen.append(trajectory)
        raise Halt("stopped by the operator")

    with pytest.raises(Halt):
        asyncio.run(arthex.capture_trajectory(halts()))
    (trajectory,) = seen
    assert trajectory.incomplete
    assert trajectory.metadata[ERROR_KEY] == "Halt: stopped by the operator"


def test_when_one_rollout_halts_the_group_every_other_rollout_has_finished_before_it_raises() -> (
    None
):
    """The group cancels the rest and waits for them: no rollout is left running (half through
    its cleanup) once the error reaches the caller."""

    async def main() -> list[str]:
        cleaned: list[str] = []
        waiting = asyncio.Event()

        async def waits() -> None:
            waiting.set()
            try:
                await asyncio.Event().wait()
            finally:
                for _ in range(3):  # a cleanup that takes a few turns of the loop
                    await asyncio.sleep(0)
                cleaned.append("waiter")

        async def halts() -> None:
            await waiting.wait()
            raise Halt("stop")

        with pytest.raises(Halt):
            await arthex.capture_trajectory_group([waits(), halts()])
        return cleaned

    assert asyncio.run(main()) == ["waiter"]
