"""Group-relative advantages, as a pure function every backend calls."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .metrics import ZERO_VARIANCE_TOLERANCE

STD_EPSILON = 1e-6


def zero_variance(rewards: Sequence[float]) -> bool:
    """True when `rewards` carry no signal to learn from: fewer than two, or all equal to the
    first within 1e-12."""
    return len(rewards) < 2 or all(abs(r - rewards[0]) <= ZERO_VARIANCE_TOLERANCE for r in rewards)


def group_advantages(rewards: Sequence[float], *, scale: bool = True) -> list[float]:
    """`A = r - mean(group)`, divided by `population_std + 1e-6` when `scale` is on.

    A group of fewer than two rewards, or whose rewards are all equal within 1e-12, carries
    no signal: every advantage is 0.0.
    """
    n = len(rewards)
    if zero_variance(rewards):
        return [0.0] * n
    mean = math.fsum(rewards) / n
    centred = [r - mean for r in rewards]
    if not scale:
        return centred
    std = math.sqrt(math.fsum(c * c for c in centred) / n)
    return [c / (std + STD_EPSILON) for c in centred]
