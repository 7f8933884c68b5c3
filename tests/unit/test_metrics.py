from __future__ import annotations

import math

import pytest

from arthex.core.errors import InvalidInputError
from arthex.core.metrics import (
    MetricsRow,
    aggregate_training_metrics,
    cumulative_key,
    merge_metrics,
    qualify_key,
    summarize,
)
from arthex.core.trajectories import Trajectory, TrajectoryGroup


def traj(score: float, /, **metrics: float | int | bool) -> Trajectory:
    reward = score
    return Trajectory(
        messages_and_choices=[{"role": "user", "content": "q"}], reward=reward, metrics=metrics
    )


def test_summary_of_a_train_batch() -> None:
    groups = [
        TrajectoryGroup(
            [traj(1.0, ok=True), traj(0.0, ok=False), ValueError("x")], metrics={"difficulty": 2}
        ),
        TrajectoryGroup([traj(0.5, ok=True, length=3)]),
        TrajectoryGroup([traj(0.2), traj(0.2)]),
        TrajectoryGroup(exceptions=[RuntimeError("all failed")], metrics={"difficulty": 9}),
    ]
    row = summarize(groups, "train")
    assert row["train/reward"] == pytest.approx((1.0 + 0.0 + 0.5 + 0.2 + 0.2) / 5)
    # population std of [1, 0] is 0.5; of [0.2, 0.2] is 0; the singleton group does not count
    assert row["train/reward_std_dev"] == pytest.approx(0.25)
    assert isinstance(row["train/reward_std_dev"], float)
    assert row["train/exception_rate"] == pytest.approx(2 / 7)
    assert row["train/ok"] == pytest.approx(2 / 3)
    assert row["train/length"] == 3.0
    # group metrics: only groups with at least one trajectory
    assert row["train/group/difficulty"] == 2.0
    # ART's names and meanings (metrics_taxonomy.py): scenarios = groups submitted = 4,
    # trajectories count failed rollouts, and only the first group's rewards differ
    assert row["data/step_num_scenarios"] == 4.0
    assert row["data/step_num_groups_submitted"] == 4.0
    assert row["data/step_num_trajectories"] == 7.0
    assert row["data/step_num_groups_trainable"] == 1.0
    assert not any(key.startswith("train/data/") for key in row)


def test_summary_without_trajectories_has_float_zero_std_and_no_reward() -> None:
    row = summarize([TrajectoryGroup(exceptions=[ValueError("boom")])], "val")
    assert "val/reward" not in row
    assert row["val/reward_std_dev"] == 0.0
    assert isinstance(row["val/reward_std_dev"], float)
    assert row["val/exception_rate"] == 1.0
    # other splits: ART's counts under the split, without the trainable count
    assert row["val/data/step_num_scenarios"] == 1.0
    assert row["val/data/step_num_trajectories"] == 1.0
    assert row["val/data/step_num_groups_submitted"] == 1.0
    assert "val/data/step_num_groups_trainable" not in row
    assert "data/step_num_groups_trainable" not in row


@pytest.mark.parametrize(
    ("key", "split", "expected"),
    [
        ("reward", "val", "val/reward"),
        ("val/reward", "val", "val/reward"),
        ("loss/train", "train", "loss/train"),
        ("time/step_s", "eval2", "time/step_s"),
        ("reward", "eval2", "eval2/reward"),
        ("eval2/reward", "eval2", "eval2/reward"),
        ("custom/thing", "val", "val/custom/thing"),
        ("train/x", "eval2", "train/x"),
    ],
)
def test_key_qualification_never_doubles_a_prefix(key: str, split: str, expected: str) -> None:
    assert qualify_key(key, split) == expected


def test_custom_split_is_prefixed_once_in_the_summary() -> None:
    row = summarize([TrajectoryGroup([traj(1.0, hits=2)])], "eval2")
    assert "eval2/reward" in row
    assert "eval2/hits" in row
    assert not any(k.startswith("eval2/eval2") for k in row)


def test_rows_store_non_finite_values_as_none_and_keep_the_key() -> None:
    row = MetricsRow(step=3, values={"a": math.nan, "b": math.inf, "c": 1})
    assert row.values == {"a": None, "b": None, "c": 1.0}
    data = row.to_json()
    assert data["step"] == data["training_step"] == 3
    assert data["recorded_at"].endswith("+00:00")
    assert MetricsRow.from_json(data) == row


@pytest.mark.parametrize("bad", [{"step": 1.0}, {"x": "text"}, {"": 1.0}])
def test_rows_refuse_bad_values(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError):
        MetricsRow(step=0, values=bad)


def test_rows_refuse_negative_steps() -> None:
    with pytest.raises(InvalidInputError):
        MetricsRow(step=-1, values={})


def test_training_metrics_are_averaged_per_key_with_canonical_names() -> None:
    averaged = aggregate_training_metrics(
        [{"loss": 1.0, "grad_norm": 2.0}, {"loss": 3.0, "loss/entropy": 0.5}]
    )
    assert averaged == {"loss/train": 2.0, "loss/grad_norm": 2.0, "loss/entropy": 0.5}


def test_reading_an_art_row_keeps_integer_zero_as_float() -> None:
    row = MetricsRow.from_json(
        {
            "val/reward_std_dev": 0,
            "step": 2,
            "training_step": 2,
            "recorded_at": "2025-01-01T00:00:00",
        }
    )
    assert row.values == {"val/reward_std_dev": 0.0}
    assert row.recorded_at.tzinfo is not None


def test_a_trajectory_or_group_metric_may_not_change_a_computed_key() -> None:
    clobbering = TrajectoryGroup([traj(1.0, **{"reward": 0.0}), traj(0.0, **{"reward": 0.0})])
    with pytest.raises(InvalidInputError, match="'val/reward'"):
        summarize([clobbering], "val")
    counting = TrajectoryGroup([traj(1.0), traj(0.0)], metrics={"data/x": 1})
    assert summarize([counting], "val")["val/group/data/x"] == 1.0
    same_value = TrajectoryGroup([traj(1.0, **{"reward": 1.0}), traj(0.0, **{"reward": 0.0})])
    assert summarize([same_value], "val")["val/reward"] == 0.5  # the same fact: allowed


def test_a_caller_mean_summed_in_another_order_is_the_same_fact() -> None:
    # from a judged run: the caller's mean, summed in its own order, differs from arthex's in
    # the last bit; a value 1e-6 away is another fact
    computed = {"val/reward": 0.0662037037037037}
    row = merge_metrics(computed, ("caller", {"val/reward": 0.06620370370370371}))
    assert row["val/reward"] == 0.0662037037037037  # arthex's value is the one written
    with pytest.raises(InvalidInputError, match="'val/reward'"):
        merge_metrics(computed, ("caller", {"val/reward": 0.0662047037037037}))
    nan = {"val/x": math.nan}
    assert math.isnan(merge_metrics(nan, ("caller", {"val/x": math.nan}))["val/x"])
    with pytest.raises(InvalidInputError, match="'val/x'"):
        merge_metrics(nan, ("caller", {"val/x": 0.0}))


def test_trajectory_group_and_caller_metrics_follow_one_qualification_rule() -> None:
    # `data/x` is a section key wherever it comes from: kept as is, never `val/data/x`
    group = TrajectoryGroup([traj(1.0, **{"data/x": 2.0, "plain": 1.0})], metrics={"g": 3})
    row = summarize([group], "val")
    assert row["data/x"] == 2.0
    assert "val/data/x" not in row
    assert row["val/plain"] == 1.0
    assert row["val/group/g"] == 3.0
    assert qualify_key("data/x", "val") == "data/x"  # what a caller's metric becomes


def test_art_keys_are_the_ones_art_writes() -> None:
    """Oracle: the key names in ART 0.5.23's metrics_taxonomy.py and model.py (copied here as
    data, so this test runs without ART installed; the interop suite runs ART itself)."""
    art_train_keys = {
        "data/step_num_scenarios",
        "data/step_num_trajectories",
        "data/step_num_groups_submitted",
        "data/step_num_groups_trainable",
    }
    art_val_keys = {
        "val/data/step_num_scenarios",
        "val/data/step_num_trajectories",
        "val/data/step_num_groups_submitted",
    }
    group = TrajectoryGroup([traj(1.0), traj(0.0)])
    train = {k for k in summarize([group], "train") if "/data/" in k or k.startswith("data/")}
    val = {k for k in summarize([group], "val") if "/data/" in k or k.startswith("data/")}
    assert train == art_train_keys
    assert val == art_val_keys


@pytest.mark.parametrize(
    ("key", "total"),
    [
        ("data/step_num_scenarios", "data/cum/num_scenarios"),
        ("data/step_num_gradient_steps", "data/cum/num_gradient_steps"),
        ("time/step_backend_train_s", "time/cum/backend_train_s"),
        ("costs/train/judge", "costs/cum/train/judge"),
        ("data/step_unused_and_dummy_ratio", None),
        ("data/cum/num_scenarios", None),
        ("val/data/step_num_scenarios", None),
        ("loss/train", None),
        ("data/other", None),
    ],
)
def test_running_total_names_follow_art(key: str, total: str | None) -> None:
    assert cumulative_key(key) == total
