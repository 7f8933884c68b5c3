"""Where a group stops carrying a training signal: rewards all equal within 1e-12 (the bound
included) give every trajectory advantage 0.0; rewards further apart are centred and scaled
as numpy computes them."""

from __future__ import annotations

import numpy as np
import pytest

from arthex.core.advantages import group_advantages


@pytest.mark.parametrize(
    "rewards",
    [
        [0.0, 1e-12],
        [0.0, 1e-12, -1e-12],
        [1.0, 1.0 + 1e-13, 1.0],
        [0.1, 0.1, 0.1],
    ],
    ids=["exactly the tolerance apart", "within it of the first", "near one", "equal tenths"],
)
@pytest.mark.parametrize("scale", [True, False])
def test_rewards_within_the_tolerance_of_the_first_give_zero_advantages(
    rewards: list[float], scale: bool
) -> None:
    assert group_advantages(rewards, scale=scale) == [0.0] * len(rewards)


@pytest.mark.parametrize("rewards", [[-1.0, 1.0], [0.0, 1e-9], [2.0, 2.0, 2.5]])
def test_rewards_further_apart_are_centred_and_scaled_like_numpy(rewards: list[float]) -> None:
    values = np.asarray(rewards)
    centred = values - values.mean()
    expected = centred / (values.std() + 1e-6)
    assert group_advantages(rewards) == pytest.approx(expected.tolist(), rel=1e-9, abs=1e-15)
    assert group_advantages(rewards, scale=False) == pytest.approx(centred.tolist(), abs=1e-15)
