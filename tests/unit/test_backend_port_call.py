"""The port form of `backend.train(run, groups, config)`: its three arguments may come by
position or keyword and reach the backend's own training unchanged; anything else is a
TypeError naming what was wrong, raised before a step runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from arthex.core.backend_train import BackendTrainEntry
from arthex.core.config import TrainConfig
from arthex.core.identity import RunRef
from arthex.core.trajectories import TrajectoryGroup
from arthex.testing.builders import make_group

RUN = RunRef("proj", "agent")
CONFIG = TrainConfig(learning_rate=2e-5)


class _Backend(BackendTrainEntry):
    """A backend whose training step reports what it was asked to train."""

    def __init__(self) -> None:
        self.calls: list[tuple[RunRef, Sequence[TrajectoryGroup], TrainConfig]] = []

    async def _steps(
        self, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        self.calls.append((run, groups, config))
        yield {"groups": float(len(groups)), "learning_rate": config.learning_rate}

    def train_steps(
        self, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        return self._steps(run, groups, config)


def _drive(steps: Any) -> list[Mapping[str, float]]:
    async def collect() -> list[Mapping[str, float]]:
        return [metrics async for metrics in steps]

    return asyncio.run(collect())


GROUPS = [make_group((0.0, 1.0)), make_group((1.0, 0.5))]


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((RUN, GROUPS, CONFIG), {}),
        ((RUN, GROUPS), {"config": CONFIG}),
        ((RUN,), {"groups": GROUPS, "config": CONFIG}),
        ((), {"run": RUN, "groups": GROUPS, "config": CONFIG}),
    ],
    ids=["by position", "config by keyword", "groups and config by keyword", "all by keyword"],
)
def test_the_run_groups_and_config_reach_the_backends_training_however_they_are_passed(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    backend = _Backend()
    steps = _drive(backend.train(*args, **kwargs))
    assert steps == [{"groups": 2.0, "learning_rate": 2e-5}]
    assert backend.calls == [(RUN, GROUPS, CONFIG)]


@pytest.mark.parametrize(
    ("args", "kwargs", "key"),
    [
        ((RUN, GROUPS, CONFIG), {"verbose": True}, "verbose"),
        ((RUN, GROUPS, CONFIG), {"config": CONFIG}, "config"),
    ],
    ids=["an unknown keyword", "an argument given twice"],
)
def test_an_unexpected_or_repeated_keyword_is_a_type_error_naming_it(
    args: tuple[Any, ...], kwargs: dict[str, Any], key: str
) -> None:
    backend = _Backend()
    with pytest.raises(TypeError) as raised:
        backend.train(*args, **kwargs)
    assert str(raised.value) == f"train(run, groups, config) got an unexpected argument {key!r}"
    assert backend.calls == []


def test_a_missing_config_is_a_type_error_naming_it() -> None:
    backend = _Backend()
    untyped: Any = backend.train  # a call the types refuse, as an untyped script makes it
    with pytest.raises(TypeError) as raised:
        untyped(RUN, GROUPS)
    assert str(raised.value) == (
        "train(run, groups, config) takes three arguments; missing ['config']"
    )
    assert backend.calls == []


def test_a_fourth_positional_argument_is_a_type_error() -> None:
    backend = _Backend()
    untyped: Any = backend.train  # a call the types refuse, as an untyped script makes it
    with pytest.raises(TypeError, match=r"takes three arguments"):
        untyped(RUN, GROUPS, CONFIG, CONFIG)
    assert backend.calls == []
