"""The reward-std-dev learning-rate multiplier.

Fit `std = m * step + b` by least squares over the per-step mean of `train/reward_std_dev`;
the multiplier is `(m * last_step + b) / b`, the fitted spread now over the fitted spread at
step 0. It is 1.0 with fewer than two steps, with `b <= 0`, or without the column, and it is
clamped to `[min_multiplier, max_multiplier]` (unlike the reference, which can return a
negative or huge learning rate).

A slope or intercept within FIT_TOLERANCE of zero counts as zero. The sums are kept
incrementally, so rounding leaves residues of ~1e-17 where the exact value is 0: a spread
rising from exactly 0 (steps 0, 1, 2 at 0, 0.1, 0.2) fits `b = 3.7e-17`, and dividing by it
would jump the multiplier to the clamp instead of the 1.0 that `b <= 0` gives.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

from .history_index import StepMeanListener

REWARD_STD_DEV_KEY = "train/reward_std_dev"
FIT_TOLERANCE = 1e-12


def fit_multiplier(
    points: Mapping[int, float], min_multiplier: float = 0.1, max_multiplier: float = 10.0
) -> float:
    """The multiplier from per-step means, directly (O(points))."""
    fit = _LeastSquares()
    for step, value in points.items():
        fit.add(float(step), value)
    return fit.multiplier(max(points, default=0), min_multiplier, max_multiplier)


class _LeastSquares:
    __slots__ = ("n", "sx", "sxx", "sxy", "sy")

    def __init__(self) -> None:
        self.n = 0
        self.sx = self.sy = self.sxx = self.sxy = 0.0

    def add(self, x: float, y: float, sign: int = 1) -> None:
        self.n += sign
        self.sx += sign * x
        self.sy += sign * y
        self.sxx += sign * x * x
        self.sxy += sign * x * y

    def multiplier(self, last_step: int, low: float, high: float) -> float:
        if self.n < 2:
            return 1.0
        denominator = self.n * self.sxx - self.sx * self.sx
        if denominator == 0:
            return 1.0
        slope = (self.n * self.sxy - self.sx * self.sy) / denominator
        if abs(slope) <= FIT_TOLERANCE:
            return 1.0
        intercept = (self.sy - slope * self.sx) / self.n
        if intercept <= FIT_TOLERANCE:
            return 1.0
        return min(max((slope * last_step + intercept) / intercept, low), high)


class RewardStdDevPolicy(StepMeanListener):
    """The multiplier, kept incrementally as per-step means change (O(1) per change without a
    window; O(window) per decision with one), so its cost does not grow with the history."""

    def __init__(self, window: int | None = None) -> None:
        self.window = window
        self._means: dict[int, float] = {}
        self._steps: list[int] = []  # sorted; new steps almost always arrive last
        self._fit = _LeastSquares()

    def step_mean_changed(self, step: int, old: float | None, new: float) -> None:
        if old is not None:
            self._fit.add(float(step), old, sign=-1)
        else:
            bisect.insort(self._steps, step)
        self._fit.add(float(step), new)
        self._means[step] = new

    def step_mean_removed(self, step: int, old: float) -> None:
        self._fit.add(float(step), old, sign=-1)
        self._steps.remove(step)
        del self._means[step]

    def multiplier(self, min_multiplier: float = 0.1, max_multiplier: float = 10.0) -> float:
        if not self._steps:
            return 1.0
        if self.window is None:
            return self._fit.multiplier(self._steps[-1], min_multiplier, max_multiplier)
        recent = self._steps[-self.window :]
        return fit_multiplier({s: self._means[s] for s in recent}, min_multiplier, max_multiplier)
