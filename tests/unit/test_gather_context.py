"""`art.gather`'s context helpers under arthex, on worked examples: the completion tokens a
trajectory's calls report, the sums and divisors `record_metrics` keeps, the failure budget of
the wrappers, and a rollout's own metrics reaching the running gather's progress line."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from arthex.art.gather import (
    GatherContext,
    gather_context_var,
    gather_trajectory_groups,
    get_gather_context,
    record_metrics,
    record_trajectory_completion_tokens,
    set_gather_context,
    wrap_group_awaitable,
    wrap_trajectories_awaitable,
)
from arthex.core.exchanges import ChatCompletionsExchange, TrajectoryExchanges
from arthex.core.progress import ProgressLine
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from tests._progress import frames


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


def choice(tokens: int | None) -> dict[str, Any]:
    extra = {} if tokens is None else {"art_completion_tokens": tokens}
    return {
        "index": 0,
        "finish_reason": "stop",
        "message": {"role": "assistant", "content": "x"},
        **extra,
    }


def legacy(*tokens: int | None, extra: tuple[int | None, ...] = ()) -> Trajectory:
    from openai.types.chat.chat_completion import Choice

    return Trajectory.model_validate(
        {
            "reward": 1.0,
            "messages_and_choices": [
                {"role": "user", "content": "q"},
                *(Choice.model_validate(choice(t)) for t in tokens),
            ],
            "additional_histories": [
                {"messages_and_choices": [Choice.model_validate(choice(t)) for t in extra]}
            ]
            if extra
            else [],
        }
    )


def captured(*usage: int | None, responses: tuple[int, ...] = ()) -> Trajectory:
    when = datetime(2026, 1, 1, tzinfo=UTC)
    calls = [
        ChatCompletionsExchange(
            start_time=when,
            end_time=when,
            request={"model": "m", "messages": [{"role": "user", "content": "q"}]},
            response=ChatCompletion.model_validate(
                {
                    "id": "c",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "m",
                    "choices": [choice(None)],
                    **(
                        {}
                        if n is None
                        else {
                            "usage": {
                                "prompt_tokens": 1,
                                "completion_tokens": n,
                                "total_tokens": n + 1,
                            }
                        }
                    ),
                }
            ),
        )
        for n in usage
    ]
    others = [{"response": {"usage": {"output_tokens": n}}} for n in responses]
    return Trajectory(
        reward=0.0, exchanges=TrajectoryExchanges(chat_completions=calls, responses=others)
    )


@pytest.mark.parametrize(
    ("trajectory", "expected"),
    [
        (legacy(3, 4), 7),  # the Choices' counts summed
        (legacy(3, extra=(5,)), 8),  # additional histories count too
        (legacy(3, None), None),  # one Choice without a count: no metric
        (legacy(3, 0), None),  # a zero count is not a count
        (legacy(), None),  # no Choice at all
        (captured(5, 6), 11),  # each call's usage.completion_tokens
        (captured(5, responses=(2,)), 7),  # responses count output_tokens
        (captured(5, None), None),  # one call without usage: no metric
    ],
    ids=["choices", "histories", "missing", "zero", "none", "calls", "responses", "no-usage"],
)
def test_completion_tokens_are_set_only_when_every_call_counts(
    trajectory: Trajectory, expected: int | None
) -> None:
    record_trajectory_completion_tokens(trajectory)
    assert trajectory.metrics.get("completion_tokens") == expected


def test_record_metrics_sums_rewards_and_metrics_with_one_divisor_each() -> None:
    context = GatherContext()
    record_metrics(context, Trajectory(reward=1.0, metrics={"m": 2.0}))
    record_metrics(context, Trajectory(reward=0.5, metrics={"m": 4.0, "ok": True}))
    record_metrics(context, legacy(3, 4))  # reward 1.0, completion_tokens 7
    assert context.metric_sums == {"reward": 2.5, "m": 6.0, "ok": 1, "completion_tokens": 7}
    assert context.metric_divisors == {"reward": 3, "m": 2, "ok": 1, "completion_tokens": 1}
    assert context.means() == {"reward": 2.5 / 3, "m": 3.0, "ok": 1.0, "completion_tokens": 7}


def test_the_budget_is_a_count_or_a_share_of_the_line() -> None:
    counted = GatherContext(max_exceptions=1)
    counted.metric_sums["exceptions"] = 1
    assert not counted.too_many_exceptions()
    counted.metric_sums["exceptions"] = 2
    assert counted.too_many_exceptions()
    share = GatherContext(pbar=ProgressLine("g", 10, enabled=False), max_exceptions=0.25)
    share.metric_sums["exceptions"] = 2  # 2 of 10 is within a quarter
    assert not share.too_many_exceptions()
    share.metric_sums["exceptions"] = 3
    assert share.too_many_exceptions()
    share.reset()
    assert (share.pbar, share.metric_sums, share.max_exceptions) == (None, Counter(), 0)


async def group(*rewards: float) -> TrajectoryGroup:
    return TrajectoryGroup([Trajectory(reward=r) for r in rewards])


async def broken() -> TrajectoryGroup:
    raise ValueError("rollout broke")


def test_the_group_wrapper_counts_failures_within_the_budget_and_raises_past_it() -> None:
    async def main() -> tuple[list[Any], GatherContext]:
        context = GatherContext(max_exceptions=1)
        with set_gather_context(context):
            kept = [await wrap_group_awaitable(group(1.0, 0.0))]
            kept.append(await wrap_group_awaitable(broken()))
            with pytest.raises(ValueError, match="rollout broke"):
                await wrap_group_awaitable(broken())
        return kept, context

    kept, context = run(main())
    assert [None if g is None else len(g.trajectories) for g in kept] == [2, None]
    assert context.metric_sums == {"reward": 1.0, "exceptions": 2}
    assert context.metric_divisors == {"reward": 2}


def test_the_rollout_wrapper_returns_the_failure_as_its_result() -> None:
    async def one(reward: float) -> Trajectory:
        return Trajectory(reward=reward)

    async def several() -> list[Trajectory]:
        return [Trajectory(reward=1.0), Trajectory(reward=3.0)]

    async def fails() -> Trajectory:
        raise KeyError("k")

    async def main() -> list[Any]:
        with set_gather_context(GatherContext(max_exceptions=1)):
            results: list[Any] = [
                await wrap_trajectories_awaitable(one(2.0)),
                await wrap_trajectories_awaitable(several()),
                await wrap_trajectories_awaitable(fails()),
            ]
            results.append(get_gather_context().metric_sums)
        return results

    single, many, failure, sums = run(main())
    assert single.reward == 2.0
    assert [t.reward for t in many] == [1.0, 3.0]
    assert isinstance(failure, KeyError)
    assert sums == {"reward": 6.0, "exceptions": 1}


def test_a_cancelled_rollout_is_not_counted_as_a_failure() -> None:
    async def cancelled() -> TrajectoryGroup:
        raise asyncio.CancelledError

    async def main() -> GatherContext:
        context = GatherContext(max_exceptions=5)
        with set_gather_context(context), pytest.raises(asyncio.CancelledError):
            await wrap_group_awaitable(cancelled())
        return context

    assert run(main()).metric_sums == Counter()


def test_outside_a_gather_the_context_is_the_one_set_last_else_the_default() -> None:
    default = gather_context_var.get()
    assert get_gather_context() is default
    mine = GatherContext()
    with set_gather_context(mine):
        assert get_gather_context() is mine
    assert get_gather_context() is default
    refused = pytest.raises(TypeError, match="takes a GatherContext, got dict")
    with refused, set_gather_context({}):  # type: ignore[arg-type]
        pass


def test_metrics_a_rollout_records_reach_the_running_gathers_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def rollout(judge: int) -> TrajectoryGroup:
        trajectory = Trajectory(reward=0.0)
        # a judge score kept out of the trajectory, for the line only
        get_gather_context().metric_sums["judge"] += judge
        get_gather_context().metric_divisors["judge"] += 1
        return TrajectoryGroup([trajectory])

    async def main() -> tuple[bool, list[TrajectoryGroup]]:
        inner = GatherContext()

        async def keeps_its_own() -> TrajectoryGroup:
            with set_gather_context(inner):  # a hand-written gather inside a rollout
                record_metrics(get_gather_context(), Trajectory(reward=9.0))
            return TrajectoryGroup([Trajectory(reward=0.0)])

        groups = await gather_trajectory_groups(
            [rollout(1), rollout(0), keeps_its_own()], progress=True
        )
        return inner.metric_sums == {"reward": 9.0}, groups

    own_tally, groups = run(main())
    assert own_tally and len(groups) == 3
    notes = [note for _, note in frames(capsys.readouterr().err)]
    # the judge's mean over the two rollouts that recorded it: (1 + 0) / 2
    assert notes[-1] == "judge=0.5 reward=0"
