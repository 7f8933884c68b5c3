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
from arthex.core.model import TrainResult
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


class _Recorder:
    """Stands in for a registered model: keeps the TrainConfig ART's call hands it."""

    run = RunRef("proj", "run-1")

    def __init__(self) -> None:
        self.configs: list[TrainConfig] = []

    async def train_for_backend(
        self, backend: object, groups: object, config: TrainConfig, *, verbose: bool
    ) -> TrainResult:
        self.configs.append(config)
        return TrainResult(step=len(self.configs), metrics={"loss": 0.5})


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, TrainConfig(learning_rate=5e-6)),
        ({"normalize_advantages": False}, TrainConfig(learning_rate=5e-6, scale_rewards=False)),
        ({"ppo": True}, TrainConfig(learning_rate=5e-6, loss_fn="ppo")),
        (
            {"learning_rate": 1e-4, "loss_fn": "importance_sampling"},
            TrainConfig(learning_rate=1e-4, loss_fn="importance_sampling"),
        ),
    ],
    ids=["defaults", "normalize_advantages off", "ppo on", "set directly"],
)
def test_arts_options_reach_the_config_as_art_reads_them(
    options: dict[str, Any], expected: TrainConfig
) -> None:
    """ART's older switches are read only when the option they stand for is left unset."""
    recorder = _Recorder()
    untyped: Any = _Backend().train
    result = asyncio.run(untyped(recorder, GROUPS, **options))
    assert recorder.configs == [expected]
    assert result == TrainResult(step=1, metrics={"loss": 0.5})  # the model's, passed on
