"""Edges of trajectories, batch metrics and batch streaming that mutation testing found
unguarded: a trajectory's own log, a captured traceback read as Python prints it, a captured
trajectory without chat calls, where a clashing metric came from, rounding around zero, and
the deprecated progress flag of `trajectory_group_batches`."""

from __future__ import annotations

import asyncio
import traceback

import pytest

from arthex.core.batch_stream import trajectory_group_batches
from arthex.core.errors import InvalidInputError
from arthex.core.exchanges import TrajectoryExchanges
from arthex.core.metrics import merge_metrics, summarize
from arthex.core.trajectories import CapturedException, Trajectory, TrajectoryGroup


def test_a_trajectory_keeps_the_lines_it_was_asked_to_log_in_order() -> None:
    trajectory = Trajectory()
    trajectory.log("tool call failed")
    trajectory.log("retried")
    assert trajectory.logs == ["tool call failed", "retried"]


def test_a_captured_traceback_reads_as_python_prints_it() -> None:
    def rollout() -> None:
        raise ValueError("no answer")

    try:
        rollout()
    except ValueError as error:
        captured = CapturedException.from_exception(error)
        printed = "".join(traceback.format_exception(error))
    assert captured.traceback == printed
    assert captured.traceback.endswith("ValueError: no answer\n")


def test_a_captured_trajectory_without_chat_calls_has_no_chat_messages() -> None:
    only_completions = Trajectory(
        exchanges=TrajectoryExchanges(completions=[{"request": {"prompt": "2+2="}}])
    )
    assert only_completions.messages() == []


def test_a_clash_says_it_came_from_a_trajectory_or_group_metric() -> None:
    clobbering = TrajectoryGroup([Trajectory(reward=1.0, metrics={"reward": 0.0})])
    with pytest.raises(
        InvalidInputError, match=r"^trajectory or group metric 'val/reward' \(0\.0\) clashes"
    ):
        summarize([clobbering], "val")


def test_a_callers_zero_that_differs_from_the_computed_zero_only_by_rounding_is_no_clash() -> None:
    # rewards 0.1, 0.2, -0.3 average to 0; summed left to right they leave 5.6e-17 (mean 1.9e-17)
    rounded = (0.1 + 0.2 - 0.3) / 3
    assert rounded != 0.0
    assert merge_metrics({"val/reward": 0.0}, ("caller", {"val/reward": rounded})) == {
        "val/reward": 0.0
    }
    with pytest.raises(InvalidInputError, match="'val/reward'"):
        merge_metrics({"val/reward": 0.0}, ("caller", {"val/reward": 1e-9}))


def test_batches_warn_that_the_completion_tokens_flag_does_nothing() -> None:
    async def stream() -> list[list[TrajectoryGroup]]:
        groups = [TrajectoryGroup([Trajectory(reward=1.0)])]
        flagged = trajectory_group_batches(groups, batch_size=1, pbar_total_completion_tokens=True)
        return [batch async for batch in flagged]

    with pytest.warns(DeprecationWarning, match="pbar_total_completion_tokens has no effect"):
        batches = asyncio.run(stream())
    assert [[group.trajectories[0].reward for group in batch] for batch in batches] == [[1.0]]
