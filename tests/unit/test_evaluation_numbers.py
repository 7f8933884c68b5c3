"""pass@k against counting subsets, and evaluate's refusals of bad arguments (before any
rollout runs)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from fractions import Fraction

import pytest

from arthex.core.errors import InvalidInputError
from arthex.core.evaluation import mean_pass_at_k, pass_at_k
from arthex.core.model import Model, ModelPorts
from arthex.core.trajectories import Trajectory
from arthex.testing.fakes.history import InMemoryHistory
from arthex.testing.fakes.stores import InMemoryTrajectoryStore


def by_counting(n: int, c: int, k: int) -> Fraction:
    """The share of the k-subsets of n rollouts (c correct) holding a correct one."""
    rollouts = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return Fraction(sum(any(rollouts[i] for i in s) for s in subsets), len(subsets))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_pass_at_k_is_the_share_of_k_subsets_with_a_correct_rollout(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(float(by_counting(n, c, k)), abs=1e-12)


def test_the_mean_counts_failed_rollouts_as_incorrect_and_never_decreases() -> None:
    rewards: Sequence[Sequence[float | None]] = [
        (1.0, 0.0, None, 1.0),
        (None, None, None, None),
        (0.5, 0.99, 1.0, 2.0),
    ]
    means = mean_pass_at_k(rewards, threshold=1.0)
    assert means == pytest.approx(
        {k: float(sum(by_counting(4, c, k) for c in (2, 0, 2)) / 3) for k in range(1, 5)}
    )
    assert list(means.values()) == sorted(means.values())
    assert mean_pass_at_k(rewards, threshold=0.5)[1] == pytest.approx((2 / 4 + 0 + 4 / 4) / 3)


class Nothing:
    def scenarios(self, split: str) -> list[int]:
        return []

    async def rollout(self, model: Model, scenario: int) -> Trajectory:
        raise AssertionError("never rolled out")


class One(Nothing):
    def scenarios(self, split: str) -> list[int]:
        return [1]


@pytest.mark.parametrize(
    ("env", "kwargs", "message"),
    [
        (One(), {"rollouts_per_example": 0}, "rollouts_per_example must be an integer >= 1"),
        (One(), {"num_examples": 0}, "num_examples must be an integer >= 1"),
        (One(), {"max_concurrency": True}, "max_concurrency must be an integer >= 1"),
        (One(), {"step": -1}, "step must be an integer >= 0"),
        (One(), {"pass_threshold": float("nan")}, "pass_threshold must be a finite number"),
        (One(), {"split": "../x"}, "split"),
        (One(), {"max_exceptions": -1}, "max_exceptions"),
        (Nothing(), {}, "Nothing offers no examples for split 'val'"),
        (object(), {}, "object is not an Environment"),
        (One(), {"step": 3}, "needs a backend that serves its checkpoints"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(
    env: object, kwargs: dict[str, object], message: str
) -> None:
    from arthex.core.evaluation import evaluate

    history = InMemoryHistory()
    model = Model(
        name="m",
        project="p",
        ports=ModelPorts(store=InMemoryTrajectoryStore(), reporter=history),
    )
    with pytest.raises(InvalidInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        asyncio.run(evaluate(model, env, **kwargs))  # type: ignore[arg-type]
    assert asyncio.run(history.rows(model.run)) == []
