from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arthex.core.advantages import group_advantages
from arthex.core.errors import InvalidInputError
from arthex.core.history_index import HistoryIndex
from arthex.core.lr_policy import REWARD_STD_DEV_KEY, RewardStdDevPolicy, fit_multiplier
from arthex.core.metrics import MetricsRow
from arthex.core.retention import BestStep, Direction, best_step, decide


def test_multiplier_follows_the_fitted_line() -> None:
    # std = -0.05 * step + 1.0 -> at step 10: 0.5 / 1.0
    points = {s: 1.0 - 0.05 * s for s in range(11)}
    assert fit_multiplier(points) == pytest.approx(0.5)


def test_multiplier_is_one_with_too_little_data_or_non_positive_intercept() -> None:
    assert fit_multiplier({}) == 1.0
    assert fit_multiplier({3: 0.4}) == 1.0
    assert fit_multiplier({0: -1.0, 1: -2.0}) == 1.0


def test_multiplier_is_clamped() -> None:
    rising = {s: 0.01 + 1.0 * s for s in range(10)}
    assert fit_multiplier(rising, 0.1, 10.0) == 10.0
    falling = {s: 1.0 - 0.2 * s for s in range(10)}
    assert fit_multiplier(falling, 0.1, 10.0) == 0.1


def test_incremental_policy_matches_the_direct_fit_as_rows_arrive() -> None:
    rng = random.Random(0)
    index = HistoryIndex()
    policy = RewardStdDevPolicy()
    index.subscribe(REWARD_STD_DEV_KEY, policy)
    rows: dict[int, list[float]] = {}
    for _ in range(300):
        step = rng.randrange(40)
        value = rng.uniform(0.1, 1.0)
        rows.setdefault(step, []).append(value)
        index.observe(MetricsRow(step=step, values={REWARD_STD_DEV_KEY: value, "other": 1.0}))
        means = {s: sum(v) / len(v) for s, v in rows.items()}
        assert policy.multiplier() == pytest.approx(fit_multiplier(means), rel=1e-6, abs=1e-9)


def test_windowed_policy_uses_only_the_last_steps() -> None:
    policy = RewardStdDevPolicy(window=3)
    index = HistoryIndex(
        MetricsRow(step=s, values={REWARD_STD_DEV_KEY: v})
        for s, v in enumerate([5.0, 5.0, 1.0, 0.9, 0.8])
    )
    index.subscribe(REWARD_STD_DEV_KEY, policy)
    assert policy.multiplier() == pytest.approx(fit_multiplier({2: 1.0, 3: 0.9, 4: 0.8}))


def test_best_step_ties_go_to_the_later_step_in_both_directions() -> None:
    assert best_step({1: 0.5, 2: 0.9, 3: 0.9}, "max") == 3
    assert best_step({1: 0.1, 2: 0.5, 3: 0.1}, "min") == 3
    with pytest.raises(InvalidInputError):
        best_step({1: 0.1}, "up")  # type: ignore[arg-type]


def test_retention_keeps_latest_best_recent_and_pinned() -> None:
    decision = decide(2, latest=6, metric="val/reward", keep_last=2, pinned={0})
    assert decision is not None
    assert decision.keep == {0, 2, 5, 6}
    assert decision.best_step == 2


def test_retention_deletes_nothing_without_the_metric() -> None:
    assert decide(None, latest=5, metric="val/reward") is None
    with pytest.raises(InvalidInputError):
        decide(1, latest=1, metric="m", keep_last=0)
    with pytest.raises(InvalidInputError):
        decide(1, latest=1, metric="m", direction="up")  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    updates=st.lists(st.tuples(st.integers(0, 50), st.floats(-1e6, 1e6)), min_size=1),
    latest=st.integers(0, 60),
    keep_last=st.integers(1, 5),
    direction=st.sampled_from(["max", "min"]),
)
def test_retention_always_keeps_the_latest_and_the_best(
    updates: list[tuple[int, float]], latest: int, keep_last: int, direction: Direction
) -> None:
    # rows arrive one by one; the incremental best matches the best over per-step means
    index = HistoryIndex()
    tracker = BestStep(direction)
    index.subscribe("m", tracker)
    for step, value in updates:
        index.observe(MetricsRow(step=step, values={"m": value}))
    means = index.step_means("m")
    assert tracker.step == best_step(means, direction)
    decision = decide(
        tracker.step, latest=latest, metric="m", keep_last=keep_last, direction=direction
    )
    assert decision is not None
    assert latest in decision.keep
    best_value = max(means.values()) if direction == "max" else min(means.values())
    assert decision.best_step is not None
    assert decision.best_step in decision.keep
    assert means[decision.best_step] == best_value
    assert decision.best_step == max(s for s, v in means.items() if v == best_value)


def test_group_advantages() -> None:
    assert group_advantages([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]
    assert group_advantages([1.0]) == [0.0]
    assert group_advantages([1.0, 0.0], scale=False) == [0.5, -0.5]
    scaled = group_advantages([1.0, 0.0])
    assert scaled[0] == pytest.approx(0.5 / (0.5 + 1e-6))
    assert sum(scaled) == pytest.approx(0.0)
