"""`train` means one thing: a backend's `train` is ART's call on a model; the port's own method
is `train_steps(run, groups, config)`. A port-form call of `train` is refused in one line that
names `train_steps`, before anything trains."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from arthex.core.backend_train import BackendTrainEntry
from arthex.core.config import TrainConfig
from arthex.core.errors import InvalidInputError
from arthex.core.identity import RunRef
from arthex.core.trajectories import TrajectoryGroup
from arthex.ports.training_backend import TrainingBackend
from arthex.testing.builders import make_group

RUN = RunRef("proj", "agent")
GROUPS = [make_group((0.0, 1.0)), make_group((1.0, 0.5))]


class _Backend(BackendTrainEntry):
    """A backend whose training step reports what it was asked to train."""

    def __init__(self) -> None:
        self.calls: list[tuple[RunRef, Sequence[TrajectoryGroup], TrainConfig]] = []

    async def train_steps(
        self, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        self.calls.append((run, groups, config))
        yield {"groups": float(len(groups))}


def test_a_port_form_call_of_train_is_refused_naming_train_steps() -> None:
    backend = _Backend()
    untyped: Any = backend.train  # a call the types refuse, as an untyped script makes it
    with pytest.raises(InvalidInputError, match=r"train_steps\(run, groups, config\)") as raised:
        asyncio.run(untyped(RUN, GROUPS))
    assert "\n" not in str(raised.value)
    assert backend.calls == []


def test_the_port_names_train_steps_and_the_entry_names_arts_parameters() -> None:
    assert "train_steps" in {name for name, _ in inspect.getmembers(TrainingBackend)}
    assert "train" not in TrainingBackend.__dict__
    parameters = inspect.signature(BackendTrainEntry.train).parameters
    assert list(parameters)[:3] == ["self", "model", "trajectory_groups"]
    assert parameters["learning_rate"].default == 5e-6  # ART 0.5.23's default
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(parameters.values())[3:]), (
        "ART's options are keywords"
    )
