"""`costs/...` metrics are what a batch spent (a judge's tokens, an API's dollars): the history
row holds their sum over every group and trajectory, under their own name, as ART logs them."""

from __future__ import annotations

import pytest

import arthex as art
from arthex.core.metrics import summarize
from arthex.testing.builders import make_trajectory


def test_costs_of_groups_and_trajectories_are_summed_over_the_batch_under_their_own_name() -> None:
    groups = [
        art.TrajectoryGroup(
            [
                make_trajectory(0.0, metrics={"costs/judge_tokens": 120, "len": 3}),
                make_trajectory(1.0, metrics={"costs/judge_tokens": 80, "len": 5}),
            ],
            metrics={"costs/dollars": 0.25},
        ),
        art.TrajectoryGroup(
            [make_trajectory(1.0, metrics={"costs/judge_tokens": 30.5, "len": 4})],
            metrics={"costs/dollars": 0.5},
        ),
    ]
    row = summarize(groups, "train")
    # hand-summed: 120 + 80 + 30.5 tokens, 0.25 + 0.5 dollars
    assert row["costs/judge_tokens"] == 230.5
    assert row["costs/dollars"] == 0.75
    assert row["train/len"] == pytest.approx(4.0)  # other metrics stay means
