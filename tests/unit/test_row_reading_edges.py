"""Edges of reading a history row written by ART or an older arthex, averaging a backend's
per-step numbers, choosing what a `train` call trains, and the warning for groups logged twice:
each checked against a hand-worked example."""

from __future__ import annotations

import json
import logging
import math
from datetime import UTC, datetime

import pytest

from arthex.core.capture.training import training_groups
from arthex.core.config import TrainConfig
from arthex.core.errors import InvalidInputError
from arthex.core.metrics import MetricsRow, aggregate_training_metrics, is_trainable_group
from arthex.core.training_record import TrainingRecord
from arthex.core.trajectories import INCOMPLETE_KEY, CapturedException, Trajectory, TrajectoryGroup

# --- MetricsRow.from_json ---------------------------------------------------------------------


def test_a_row_with_only_step_reads_at_that_step() -> None:
    row = MetricsRow.from_json(json.loads('{"step":4,"train/reward":0.5}'))
    assert (row.step, dict(row.values)) == (4, {"train/reward": 0.5})


def test_a_row_with_only_training_step_reads_at_that_step() -> None:
    row = MetricsRow.from_json(json.loads('{"training_step":6,"train/reward":0.5}'))
    assert (row.step, dict(row.values)) == (6, {"train/reward": 0.5})


def test_step_wins_over_training_step_when_both_are_written() -> None:
    assert MetricsRow.from_json({"step": 2, "training_step": 9}).step == 2


def test_a_step_written_as_a_whole_float_reads_as_that_integer() -> None:
    row = MetricsRow.from_json(json.loads('{"step":3.0,"x":1}'))
    assert row.step == 3 and type(row.step) is int


@pytest.mark.parametrize("obj", [{"x": 1.0}, {"step": "3"}, {"step": True}, {"step": 2.5}])
def test_a_row_without_an_integer_step_is_refused_showing_the_row(obj: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError) as caught:
        MetricsRow.from_json(obj)
    assert str(caught.value) == f"history row has no integer 'step': {obj!r}"


def test_a_row_without_recorded_at_reads_as_recorded_now() -> None:
    before = datetime.now(UTC)
    row = MetricsRow.from_json({"step": 1, "x": 2})
    after = datetime.now(UTC)
    assert before <= row.recorded_at <= after


def test_only_numbers_and_nulls_become_values() -> None:
    obj = json.loads('{"step":1,"x":2,"y":null,"flag":true,"name":"abc","list":[1],"d":{}}')
    assert dict(MetricsRow.from_json(obj).values) == {"x": 2.0, "y": None}


# --- aggregate_training_metrics ---------------------------------------------------------------


def test_a_non_finite_first_sample_does_not_hide_the_finite_ones_after_it() -> None:
    averaged = aggregate_training_metrics(
        [{"loss": math.nan}, {"loss": 2.0}, {"loss": math.inf}, {"loss": 4.0}]
    )
    assert averaged == {"loss/train": 3.0}


# --- is_trainable_group -----------------------------------------------------------------------


def test_rewards_exactly_the_tolerance_apart_count_as_equal() -> None:
    equal = TrajectoryGroup(trajectories=[Trajectory(reward=0.0), Trajectory(reward=1e-12)])
    apart = TrajectoryGroup(trajectories=[Trajectory(reward=0.0), Trajectory(reward=2e-12)])
    assert abs(1e-12 - 0.0) == 1e-12
    assert not is_trainable_group(equal)
    assert is_trainable_group(apart)


# --- training_groups --------------------------------------------------------------------------


def crashed(reward: float) -> Trajectory:
    return Trajectory(reward=reward, metadata={INCOMPLETE_KEY: True})


def dressed(trajectories: list[Trajectory], partial: Trajectory | None = None) -> TrajectoryGroup:
    exceptions = (
        []
        if partial is None
        else [CapturedException(type="RuntimeError", message="boom", trajectory=partial)]
    )
    return TrajectoryGroup(
        trajectories=trajectories,
        exceptions=exceptions,
        metadata={"task": "t-1"},
        metrics={"judge_score": 0.25},
        logs=["rolled out twice"],
    )


def test_a_group_with_incomplete_trajectories_dropped_keeps_its_metadata_metrics_and_logs() -> None:
    whole = Trajectory(reward=1.0)
    group = dressed([whole, crashed(0.0)])
    (trained,) = training_groups([group], TrainConfig())
    assert trained.trajectories == [whole]
    assert (trained.metadata, trained.metrics, trained.logs) == (
        {"task": "t-1"},
        {"judge_score": 0.25},
        ["rolled out twice"],
    )


def test_a_group_with_partial_trajectories_added_keeps_its_metadata_metrics_and_logs() -> None:
    whole, partial = Trajectory(reward=1.0), crashed(0.5)
    group = dressed([whole], partial)
    (trained,) = training_groups([group], TrainConfig(train_incomplete_trajectories=True))
    assert trained.trajectories == [whole, partial]
    assert (trained.metadata, trained.metrics, trained.logs) == (
        {"task": "t-1"},
        {"judge_score": 0.25},
        ["rolled out twice"],
    )


def test_groups_without_partials_pass_through_and_the_rest_still_get_theirs() -> None:
    plain = dressed([Trajectory(reward=1.0), Trajectory(reward=0.0)])
    partial = crashed(0.5)
    mixed = dressed([Trajectory(reward=1.0)], partial)
    result = training_groups([plain, mixed], TrainConfig(train_incomplete_trajectories=True))
    assert len(result) == 2
    assert result[0] is plain
    assert result[1].trajectories[-1] is partial


# --- TrainingRecord.not_yet_logged ------------------------------------------------------------


def test_groups_logged_again_after_train_are_skipped_with_a_warning_saying_what_to_do(
    caplog: pytest.LogCaptureFixture,
) -> None:
    groups = [dressed([Trajectory(reward=1.0)]), dressed([Trajectory(reward=0.0)])]
    record = TrainingRecord()
    record.logged_by_train(3, groups)
    with caplog.at_level(logging.WARNING, logger="arthex"):
        assert record.not_yet_logged(list(groups), "train") == []
    assert [r.getMessage() for r in caplog.records] == [
        "these 2 groups were already logged by model.train at step 3 (it logs the groups it "
        "trains on); not logging them again. With model.train, log only evaluations; with "
        "backend.train, log the groups yourself"
    ]
