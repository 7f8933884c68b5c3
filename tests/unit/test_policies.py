from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import assume, given, settings
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


def numpy_multiplier(points: dict[int, float]) -> float:
    """The reference formula with numpy's least-squares fit: the oracle, unclamped."""
    steps = sorted(points)
    slope, intercept = np.polyfit(steps, [points[s] for s in steps], 1)
    return float((slope * steps[-1] + intercept) / intercept)


def test_multiplier_matches_a_worked_example() -> None:
    # x = 0..3, y = 1.0, 0.8, 0.7, 0.5: mean x 1.5, mean y 0.75; Sxy = -0.8, Sxx = 5,
    # so m = -0.16 and b = 0.75 + 0.16 * 1.5 = 0.99; at step 3: (0.99 - 0.48) / 0.99 = 17/33
    assert fit_multiplier({0: 1.0, 1: 0.8, 2: 0.7, 3: 0.5}) == pytest.approx(17 / 33, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.integers(0, 200), st.floats(0.05, 2.0, allow_nan=False), min_size=2, max_size=40
    )
)
def test_multiplier_matches_numpys_fit(points: dict[int, float]) -> None:
    steps = sorted(points)
    slope, intercept = np.polyfit(steps, [points[s] for s in steps], 1)
    assume(intercept > 1e-6 and abs(slope) > 1e-9)  # away from the tolerance rules
    expected = min(max(numpy_multiplier(points), 0.1), 10.0)
    assert fit_multiplier(points) == pytest.approx(expected, rel=1e-6, abs=1e-9)


def test_multiplier_is_clamped_past_both_bounds() -> None:
    rising = {s: 0.01 + 1.0 * s for s in range(10)}
    falling = {s: 1.0 - 0.2 * s for s in range(10)}
    assert numpy_multiplier(rising) == pytest.approx(901.0)  # far past the upper bound
    assert numpy_multiplier(falling) == pytest.approx(-0.8)  # below the lower one (negative)
    assert fit_multiplier(rising, 0.1, 10.0) == 10.0
    assert fit_multiplier(falling, 0.1, 10.0) == 0.1
    assert fit_multiplier(rising, 0.5, 2.0) == 2.0  # the bounds are the caller's
    assert fit_multiplier(falling, 0.5, 2.0) == 0.5
    inside = {0: 1.0, 1: 0.8, 2: 0.7, 3: 0.5}  # 17/33: within both bounds, untouched
    assert fit_multiplier(inside, 0.5, 2.0) == pytest.approx(17 / 33)


def test_a_spread_rising_from_zero_is_not_a_jump_to_the_clamp() -> None:
    """The defect: steps 0, 1, 2 at spreads 0, 0.1, 0.2 fit an intercept of 3.7e-17 (0 in
    exact arithmetic; numpy gets -2.6e-17) and the multiplier hit the clamp at 10."""
    assert fit_multiplier({0: 0.0, 1: 0.1, 2: 0.2}) == 1.0
    assert fit_multiplier({0: 0.3, 1: 0.3, 2: 0.3}) == 1.0  # flat: slope 0 within tolerance
    index = HistoryIndex()
    policy = RewardStdDevPolicy()
    index.subscribe(REWARD_STD_DEV_KEY, policy)
    for step in range(3):  # spreads 0, 0.1, 0.2 within each step: a flat per-step mean
        for value in (0.0, 0.1, 0.2):
            index.observe(MetricsRow(step=step, values={REWARD_STD_DEV_KEY: value}))
    assert policy.multiplier() == 1.0


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


def test_the_in_memory_backend_learns_in_the_direction_of_the_reward() -> None:
    """The fake's "weights" move like a policy gradient: tokens of the better rollout up,
    of the worse one down (flipping the advantage's sign fails this)."""
    import asyncio

    from arthex.core.config import TrainConfig
    from arthex.core.identity import ModelSpec, RunRef
    from arthex.core.trajectories import TrajectoryGroup
    from arthex.testing.builders import make_choice, make_trajectory
    from arthex.testing.fakes.backend import InMemoryBackend

    run = RunRef("p", "fake")
    good = make_trajectory(1.0, choice=make_choice("a", token_ids=[7]))
    bad = make_trajectory(0.0, choice=make_choice("b", token_ids=[9]))

    async def go() -> dict[int, float]:
        backend = InMemoryBackend()
        await backend.register(ModelSpec(run, base_model="tiny"))
        async for _ in backend.train_steps(run, [TrajectoryGroup([good, bad])], TrainConfig()):
            pass
        return backend.weights(run)

    weights = asyncio.run(go())
    assert weights[7] > 0 > weights[9]
    assert weights[7] == pytest.approx(-weights[9])
