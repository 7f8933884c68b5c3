"""Edges of the learning-rate multiplier and of the best-step rule that mutation testing found
unguarded: defaults, the empty history, the window and the caller's bounds, the tolerance's
boundary, a bad direction's message, and steps past float precision."""

from __future__ import annotations

import pytest

from arthex.core.errors import InvalidInputError
from arthex.core.history_index import HistoryIndex
from arthex.core.lr_policy import REWARD_STD_DEV_KEY, RewardStdDevPolicy, fit_multiplier
from arthex.core.metrics import MetricsRow
from arthex.core.retention import BestStep, best_step


def policy_over(spreads: list[float], window: int | None = None) -> RewardStdDevPolicy:
    """A policy fed one row per step (steps 0, 1, ...) with these reward spreads."""
    policy = RewardStdDevPolicy(window=window)
    index = HistoryIndex(
        MetricsRow(step=step, values={REWARD_STD_DEV_KEY: spread})
        for step, spread in enumerate(spreads)
    )
    index.subscribe(REWARD_STD_DEV_KEY, policy)
    return policy


# --- the learning-rate multiplier -----------------------------------------------------------


def test_a_policy_that_has_seen_no_rows_leaves_the_learning_rate_alone() -> None:
    assert RewardStdDevPolicy().multiplier() == 1.0
    assert RewardStdDevPolicy(window=3).multiplier() == 1.0


def test_a_rising_spread_is_clamped_at_ten_by_default() -> None:
    # std = 0.01 + step: at step 9 the fit is 9.01 / 0.01 = 901, far past the default bound
    policy = policy_over([0.01 + step for step in range(10)])
    assert policy.multiplier() == 10.0
    assert policy.multiplier(max_multiplier=2.0) == 2.0


def test_a_windowed_policy_clamps_at_the_callers_upper_bound() -> None:
    # the last three steps (2, 3, 4 at 0.3, 0.4, 0.5) fit m = 0.1, b = 0.1: 0.5 / 0.1 = 5
    policy = policy_over([5.0, 5.0, 0.3, 0.4, 0.5], window=3)
    assert policy.multiplier() == pytest.approx(5.0)
    assert policy.multiplier(0.1, 2.0) == 2.0


def test_a_window_fits_exactly_the_last_steps() -> None:
    # window 2 of five steps: steps 3 and 4 (0.5, 0.25) fit m = -0.25, b = 1.25, so at
    # step 4: 0.25 / 1.25 = 0.2. Steps 2..4 (1.0, 0.5, 0.25) would fit m = -3/8, b = 41/24,
    # so 5/41.
    policy = policy_over([4.0, 2.0, 1.0, 0.5, 0.25], window=2)
    assert policy.multiplier() == pytest.approx(0.2)
    assert fit_multiplier({2: 1.0, 3: 0.5, 4: 0.25}) == pytest.approx(5 / 41)


def test_spreads_at_rounding_level_leave_the_learning_rate_alone_at_the_tolerance() -> None:
    # Spreads of a few 1e-12 are rewards equal up to rounding. Falling 2e-12 -> 0 over two
    # steps fits a slope of exactly -FIT_TOLERANCE (flat by the rule, else 0 / 2e-12: the
    # floor); rising 1e-12 -> 4.1e-12 over three fits an intercept of exactly FIT_TOLERANCE
    # (zero by the rule, else 4.1e-12 / 1e-12: x4.1).
    assert fit_multiplier({0: 2e-12, 2: 0.0}) == 1.0
    assert fit_multiplier({0: 1e-12, 3: 4.1e-12}) == 1.0


def test_steps_too_large_to_tell_apart_as_floats_leave_the_learning_rate_alone() -> None:
    # 2**53 and 2**53 + 1 are the same float: no slope can be fitted through one x value
    assert float(2**53) == float(2**53 + 1)
    assert fit_multiplier({2**53: 0.5, 2**53 + 1: 0.9}) == 1.0


# --- the best step ----------------------------------------------------------------------------


def test_the_best_step_is_the_highest_mean_unless_told_otherwise() -> None:
    assert best_step({1: 0.2, 2: 0.9, 3: 0.4}) == 2
    tracker = BestStep()
    for step, mean in [(1, 0.2), (2, 0.9), (3, 0.4)]:
        tracker.step_mean_changed(step, None, mean)
    assert tracker.step == 2


def test_there_is_no_best_step_before_any_mean_was_logged() -> None:
    assert best_step({}) is None
    assert best_step({}, "min") is None
    assert BestStep("min").step is None


def test_a_bad_direction_is_refused_naming_it_and_the_two_that_work() -> None:
    with pytest.raises(InvalidInputError, match="direction must be 'max' or 'min', got 'up'"):
        best_step({1: 0.5}, "up")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="got 'highest'"):
        BestStep("highest")  # type: ignore[arg-type]
