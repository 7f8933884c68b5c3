"""The rollout helpers ART scripts use, with ART 0.5.23's names and meaning: awaitable
`TrajectoryGroup(...)`, `trajectory_group`, `gather_trajectory_groups(after_each=...,
max_metrics=...)`, `gather_trajectories`, `trajectory_group_batches`, and the chat types."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import get_args

import pytest
from openai.types.chat.chat_completion import Choice

import arthex as art
from arthex.core.errors import InvalidInputError, TooManyExceptionsError


async def scored(
    reward: float, *, fail: bool = False, gate: asyncio.Event | None = None
) -> art.Trajectory:
    if gate is not None:
        await gate.wait()
    if fail:
        raise ValueError(f"rollout {reward} failed")
    return art.Trajectory(messages_and_choices=[], reward=reward, metrics={"len": reward * 2})


def test_a_group_built_from_rollouts_is_awaited_like_arts() -> None:
    calls = [0]

    async def rollout(i: int) -> art.Trajectory:
        calls[0] += 1
        await asyncio.sleep(0.001 * (3 - i))  # finish in reverse order
        if i == 1:
            raise KeyError("no scenario")
        return art.Trajectory(reward=float(i))

    async def main() -> art.TrajectoryGroup:
        group = art.TrajectoryGroup((rollout(i) for i in range(4)), metadata={"scenario": "s1"})
        assert isinstance(group, art.TrajectoryGroup) and group.pending
        first, second = await asyncio.gather(wait_for(group), wait_for(group))  # run once
        assert first is second is group
        assert await group is group
        return group

    group = asyncio.run(main())
    assert calls == [4]
    assert [t.reward for t in group] == [0.0, 2.0, 3.0]  # input order (ART: finishing order)
    assert [e.type for e in group.exceptions] == ["KeyError"]
    assert group.metadata == {"scenario": "s1"} and not group.pending


def test_gather_takes_unawaited_groups_as_the_art_docs_write_them() -> None:
    async def main() -> list[art.TrajectoryGroup]:
        return await art.gather_trajectory_groups(
            (art.TrajectoryGroup(scored(r + k) for k in range(3)) for r in (0.0, 10.0)),
            pbar_desc="gather",
        )

    groups = asyncio.run(main())
    assert len(groups) == 2 and [len(g) for g in groups] == [3, 3]
    assert [t.reward for t in groups[1]] == [10.0, 11.0, 12.0]


def test_trajectory_group_takes_arts_arguments() -> None:
    async def main() -> None:
        shared = scored(1.0)
        group = await art.trajectory_group(
            [shared, art.Trajectory(reward=5.0), shared, ValueError("given")],
            exceptions=[RuntimeError("extra")],
            metadata={"id": 7},
        )
        # one awaitable listed twice is awaited once and fills both places
        assert [t.reward for t in group] == [1.0, 5.0, 1.0]
        assert [e.type for e in group.exceptions] == ["ValueError", "RuntimeError"]
        assert group.metadata == {"id": 7}

        captured = await art.trajectory_group([scored(1.0), scored(2.0, fail=True)])
        assert len(captured) == 1 and captured.exceptions[0].message == "rollout 2.0 failed"

        gate = asyncio.Event()
        never = scored(3.0, gate=gate)
        with pytest.raises(ValueError, match=r"rollout 2.0 failed"):  # ART's default
            await art.trajectory_group([never, scored(2.0, fail=True)], return_exceptions=False)

    asyncio.run(main())


def test_after_each_keeps_replaces_splits_or_drops_each_group_in_input_order() -> None:
    seen: list[float] = []

    async def judge(
        group: art.TrajectoryGroup,
    ) -> art.TrajectoryGroup | list[art.TrajectoryGroup] | None:
        first = group.trajectories[0].reward
        seen.append(first)
        if first == 0.0:
            for t in group:
                t.reward = t.reward + 100  # rescored, as a RULER judge would
            return group
        if first == 10.0:
            return None
        return [art.TrajectoryGroup([t]) for t in group]

    async def main() -> list[art.TrajectoryGroup]:
        return await art.gather_trajectory_groups(
            [art.trajectory_group(scored(r + k) for k in range(2)) for r in (0.0, 10.0, 20.0)],
            after_each=judge,
        )

    groups = asyncio.run(main())
    assert sorted(seen) == [0.0, 10.0, 20.0]
    assert [[t.reward for t in g] for g in groups] == [[100.0, 101.0], [20.0], [21.0]]


def test_an_after_each_failure_propagates_and_the_budget_counts_rollouts_before_it() -> None:
    async def broken(group: art.TrajectoryGroup) -> art.TrajectoryGroup:
        raise RuntimeError("judge unreachable")

    with pytest.raises(RuntimeError, match="judge unreachable"):
        asyncio.run(
            art.gather_trajectory_groups([art.trajectory_group([scored(1.0)])], after_each=broken)
        )

    async def drop(group: art.TrajectoryGroup) -> None:
        return None

    with pytest.raises(TooManyExceptionsError, match=r"rollout 1\.0 failed"):
        asyncio.run(
            art.gather_trajectory_groups(
                [art.trajectory_group([scored(1.0, fail=True)])], after_each=drop
            )
        )


def test_the_progress_line_shows_running_metric_means_capped_by_max_metrics(
    capsys: pytest.CaptureFixture[str],
) -> None:
    asyncio.run(
        art.gather_trajectory_groups(
            [art.trajectory_group([scored(1.0), scored(3.0)])], progress=True, max_metrics=1
        )
    )
    line = capsys.readouterr().err
    assert "reward=2" in line and "len=" not in line
    asyncio.run(
        art.gather_trajectory_groups(
            [art.trajectory_group([scored(1.0), scored(3.0)])], progress=True
        )
    )
    assert "len=4" in capsys.readouterr().err
    with pytest.raises(InvalidInputError, match="max_metrics"):
        asyncio.run(art.gather_trajectory_groups([], max_metrics=-1))
    with pytest.warns(DeprecationWarning, match="pbar_total_completion_tokens"):
        asyncio.run(art.gather_trajectory_groups([], pbar_total_completion_tokens=True))


def test_gather_trajectories_keeps_order_and_failures_within_the_budget() -> None:
    async def several(n: int) -> list[art.Trajectory]:
        return [art.Trajectory(reward=float(i)) for i in range(n)]

    async def main() -> None:
        plain = await art.gather_trajectories([scored(2.0), scored(1.0)])
        assert [t.reward for t in plain] == [2.0, 1.0]
        mixed = await art.gather_trajectories(
            [scored(1.0), scored(2.0, fail=True), scored(3.0)], max_exceptions=1
        )
        assert isinstance(mixed[1], ValueError)
        assert [t.reward for t in (mixed[0], mixed[2]) if isinstance(t, art.Trajectory)] == [
            1.0,
            3.0,
        ]
        lists = await art.gather_trajectories([several(2), several(1)])
        assert [[t.reward for t in batch] for batch in lists] == [[0.0, 1.0], [0.0]]
        with pytest.raises(TooManyExceptionsError) as raised:
            await art.gather_trajectories([scored(1.0), scored(2.0, fail=True)])
        assert isinstance(raised.value.__cause__, ValueError)  # the rollout's own error
        half = await art.gather_trajectories(
            [scored(1.0), scored(2.0, fail=True)], max_exceptions=0.5
        )
        assert len(half) == 2

    asyncio.run(main())


def test_batches_fill_as_groups_finish_with_bounded_concurrency_and_skips() -> None:
    started: list[int] = []
    running = [0]
    peak = [0]

    async def group(i: int) -> art.TrajectoryGroup:
        started.append(i)
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0)
        running[0] -= 1
        return art.TrajectoryGroup([art.Trajectory(reward=float(i))])

    async def main() -> list[list[int]]:
        batches = []
        async for batch in art.trajectory_group_batches(
            (group(i) for i in range(11)), batch_size=3, max_concurrent_batches=2, skip_batches=1
        ):
            batches.append(sorted(int(g.trajectories[0].reward) for g in batch))
        return batches

    batches = asyncio.run(main())
    assert [len(b) for b in batches] == [3, 3, 2]  # 11 - 3 skipped = 8: the last batch is short
    assert sorted(x for b in batches for x in b) == list(range(3, 11))
    assert sorted(started) == list(range(3, 11))  # the skipped groups were never started
    assert peak[0] <= 6


def test_a_batch_with_too_many_failed_rollouts_raises() -> None:
    async def main() -> None:
        async for _ in art.trajectory_group_batches(
            [art.trajectory_group([scored(1.0), scored(2.0, fail=True)])], batch_size=1
        ):
            raise AssertionError("the batch should not be yielded")

    with pytest.raises(TooManyExceptionsError, match="max_batch_exceptions=0"):
        asyncio.run(main())
    with pytest.raises(InvalidInputError, match="batch_size"):
        asyncio.run(first_batch(art.trajectory_group_batches([], batch_size=0)))


def test_chat_types_are_the_openai_request_types() -> None:
    messages: art.Messages = [{"role": "user", "content": "hi"}]
    tools: art.Tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    mixed: art.MessagesAndChoices = [*messages]
    assert messages and tools and mixed
    assert Choice in get_args(get_args(art.MessagesAndChoices)[0])
    trajectory = art.Trajectory(messages_and_choices=messages, tools=tools)
    sent: art.Messages = trajectory.messages()  # passes to chat.completions.create as is
    assert sent == [{"role": "user", "content": "hi"}]


async def first_batch(batches: AsyncIterator[list[art.TrajectoryGroup]]) -> object:
    return await anext(batches)


async def wait_for(group: Awaitable[art.TrajectoryGroup]) -> art.TrajectoryGroup:
    return await group
