"""Edges of the model, the trainable model and their value types that mutation testing found
unguarded: what each refused name, step, config and coefficient is told, what a trainable
model's spec records in model.json, the progress line's loss note, the trainer's wall time,
and a ledger damaged in the middle. Real files in tmp_path, the in-memory backend for training.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import arthex as art
from arthex.core.config import TrainConfig
from arthex.core.errors import (
    CorruptDataError,
    InvalidInputError,
    InvalidNameError,
    RunBusyError,
    UnsupportedCapability,
)
from arthex.core.exchanges import TrajectoryExchanges
from arthex.core.history_index import HistoryIndex
from arthex.core.identity import ModelSpec, RunRef, validate_name
from arthex.core.metrics import MetricsRow
from arthex.core.model import Model, ModelPorts, config_json
from arthex.core.retention import RetentionDecision
from arthex.core.trainable import TrainableModel
from arthex.core.training_row import TRAINER_SECONDS_KEY
from arthex.ports.training_backend import BackendCapabilities, Capability
from arthex.testing.builders import make_group, synthetic_groups
from arthex.testing.fakes.backend import InMemoryBackend
from arthex.testing.fakes.history import InMemoryHistory
from arthex.testing.fakes.leases import InMemoryRunLeases
from arthex.testing.fakes.stores import InMemoryTrajectoryStore

from ._model_ports import ports_from
from .test_model_edges import SAFE_SEGMENT_HINT, DictRunState, ServingBackend, trainable
from .test_run_lease_model import trainable as leased_trainable


def core_trainable(**kwargs: Any) -> TrainableModel:
    ports = ports_from(kwargs)
    options: dict[str, Any] = {"name": "m", "project": "p", "base_model": "tiny", **kwargs}
    return TrainableModel(**options, ports=ports)


# -- names, steps and values refused ----------------------------------------------------------


def test_a_refused_name_is_told_what_was_wrong_with_it() -> None:
    cases: list[tuple[object, str]] = [
        (3, "name must be a string, got int: 3"),
        ("", "name must not be empty"),
        ("a" * 129, "name is 129 characters long; at most 128 are allowed"),
        ("a/b", f"name 'a/b' {SAFE_SEGMENT_HINT}"),
    ]
    for value, message in cases:
        with pytest.raises(InvalidNameError) as caught:
            validate_name(value)
        assert str(caught.value) == message
    assert validate_name("a" * 128) == "a" * 128


def test_the_latest_step_is_served_under_the_bare_run_name() -> None:
    run = RunRef(project="p", name="m")
    assert run.inference_name() == "m"
    assert run.inference_name(None) == "m"
    assert run.inference_name(0) == "m@0"


def test_a_coefficient_must_be_a_finite_number_not_a_flag_or_other_text() -> None:
    for value in (math.nan, math.inf, True, "a tenth", -0.5):
        with pytest.raises(InvalidInputError) as caught:
            TrainConfig(kl_penalty_coef=value)  # type: ignore[arg-type]
        assert str(caught.value) == (
            f"TrainConfig.kl_penalty_coef must be a finite number >= 0, got {value!r}"
        )
    assert TrainConfig(kl_penalty_coef=0).kl_penalty_coef == 0
    assert TrainConfig(kl_penalty_coef="0.1").kl_penalty_coef == 0.1  # type: ignore[arg-type]


def test_equal_learning_rate_multiplier_bounds_pin_the_multiplier() -> None:
    config = TrainConfig(min_lr_multiplier=2.0, max_lr_multiplier=2.0)
    assert (config.min_lr_multiplier, config.max_lr_multiplier) == (2.0, 2.0)
    with pytest.raises(InvalidInputError, match=r"min_lr_multiplier \(3.0\) is above"):
        TrainConfig(min_lr_multiplier=3.0, max_lr_multiplier=2.0)


def test_exchanges_of_any_one_api_make_a_trajectory_recorded() -> None:
    assert not TrajectoryExchanges()
    assert TrajectoryExchanges(completions=[{"id": "c"}])
    assert TrajectoryExchanges(responses=[{"id": "r"}])
    assert TrajectoryExchanges(messages=[{"id": "m"}])


def test_the_running_total_of_a_metric_adds_up_every_row_of_that_metric_only() -> None:
    index = HistoryIndex(
        [
            MetricsRow(step=1, values={"a": 1.0}),
            MetricsRow(step=2, values={"a": 2.0, "b": 5.0}),
            MetricsRow(step=2, values={"a": 4.0, "b": None}),
        ]
    )
    assert index.total("a") == 7.0
    assert index.total("b") == 5.0
    assert index.total("c") == 0.0


def test_a_model_name_must_be_a_non_empty_string() -> None:
    names: list[Any] = ["", 3]
    for name in names:
        with pytest.raises(InvalidNameError) as caught:
            Model(
                name=name,
                project="p",
                ports=ModelPorts(store=InMemoryTrajectoryStore(), reporter=InMemoryHistory()),
            )
        assert str(caught.value) == f"name must be a non-empty string, got {name!r}"


def test_models_keep_their_base_path_and_default_to_dot_art() -> None:
    plain = Model(
        name="m",
        project="p",
        ports=ModelPorts(store=InMemoryTrajectoryStore(), reporter=InMemoryHistory()),
    )
    assert plain.base_path == ".art"
    placed = Model(
        name="m",
        project="p",
        base_path="runs",
        ports=ModelPorts(store=InMemoryTrajectoryStore(), reporter=InMemoryHistory()),
    )
    assert placed.base_path == "runs"
    assert core_trainable().spec().base_path == ".art"
    spec = core_trainable(base_path="runs").spec()
    assert (spec.base_path, spec.trainable, spec.base_model) == ("runs", True, "tiny")


def test_a_pydantic_config_is_recorded_as_json_values() -> None:
    class Settings(BaseModel):
        where: Path
        when: datetime

    settings = Settings(where=Path("/data/x"), when=datetime(2025, 1, 2, tzinfo=UTC))
    assert config_json(settings) == {"where": "/data/x", "when": "2025-01-02T00:00:00Z"}
    with pytest.raises(InvalidInputError) as caught:
        config_json(3)
    assert str(caught.value) == "config must be a mapping or a pydantic model, got int"


def test_log_refuses_a_negative_boolean_or_textual_step_and_names_a_bad_split(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        model = trainable(tmp_path)
        for step in (-1, True, "1"):
            with pytest.raises(InvalidInputError) as caught:
                await model.log(metrics={"x": 1.0}, step=step)  # type: ignore[arg-type]
            assert str(caught.value) == f"step must be an integer >= 0, got {step!r}"
        with pytest.raises(InvalidNameError) as bad_split:
            await model.log(metrics={"x": 1.0}, split="a/b", step=0)
        assert str(bad_split.value) == f"split 'a/b' {SAFE_SEGMENT_HINT}"
        await model.close()

    asyncio.run(main())
    assert not (tmp_path / "p" / "models" / "m" / "history.jsonl").exists()


def test_a_trajectory_metric_that_clashes_with_a_computed_one_is_named_as_such(
    tmp_path: Path,
) -> None:
    group = make_group([0.0, 1.0])
    for trajectory in group.trajectories:
        trajectory.metrics["reward"] = 7.0  # the computed mean reward is 0.5

    async def main() -> None:
        model = trainable(tmp_path)
        with pytest.raises(InvalidInputError) as caught:
            await model.log([group], step=0)
        assert str(caught.value).startswith("trajectory or group metric 'val/reward' (7.0)")
        await model.close()

    asyncio.run(main())


# -- a trainable model: register, train ------------------------------------------------------


def test_a_registered_trainable_model_records_its_spec_in_model_json(tmp_path: Path) -> None:
    async def main() -> None:
        model = trainable(tmp_path)
        await model.register(InMemoryBackend())
        await model.close()

    asyncio.run(main())
    spec = json.loads((tmp_path / "p" / "models" / "m" / "model.json").read_text())
    assert spec["trainable"] is True
    assert spec["base_model"] == "tiny"


class LossNamingBackend(InMemoryBackend):
    """Reports each gradient step's loss under `loss/train`, `loss` or neither, in turn."""

    async def train_steps(
        self, run: RunRef, groups: Sequence[art.TrajectoryGroup], config: TrainConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        async for _ in super().train_steps(run, groups, config):
            pass
        yield {"loss/train": 0.25, "loss": 9.0}
        yield {"loss": 0.5}
        yield {"grad_norm": 1.0}


def test_the_progress_line_notes_each_steps_loss_preferring_loss_train(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def main() -> None:
        model = trainable(tmp_path)
        await model.register(LossNamingBackend())
        await model.train(synthetic_groups(), progress=True)
        await model.close()

    asyncio.run(main())
    lines = [line.rstrip("\n") for line in capsys.readouterr().err.split("\r")]
    steps = [re.search(r"\d\.\ds( .*)?$", line) for line in lines if "gradient step" in line]
    assert [(m.group(1) or "").strip() if m else None for m in steps] == [
        "loss=0.25",
        "loss=0.5",
        "",
    ]


def test_the_trainers_wall_time_lies_within_the_train_call(tmp_path: Path) -> None:
    async def main() -> tuple[float, float]:
        model = trainable(tmp_path)
        await model.register(InMemoryBackend())
        before = time.monotonic()
        result = await model.train(synthetic_groups())
        took = time.monotonic() - before
        await model.close()
        seconds = result.metrics[TRAINER_SECONDS_KEY]
        assert seconds is not None
        return float(seconds), took

    seconds, took = asyncio.run(main())
    assert 0.0 <= seconds <= took


def test_verbose_training_logs_the_step_it_advanced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        model = trainable(tmp_path)
        await model.register(InMemoryBackend())
        await model.train(synthetic_groups(), verbose=True)
        await model.close()

    with caplog.at_level(logging.INFO, logger="arthex"):
        asyncio.run(main())
    assert any(r.getMessage().startswith("trained step 0 -> 1 in ") for r in caplog.records)


def test_a_config_the_backend_cannot_train_is_refused_naming_the_backend(tmp_path: Path) -> None:
    async def main() -> None:
        model = trainable(tmp_path)
        await model.register(InMemoryBackend())
        with pytest.raises(UnsupportedCapability) as caught:
            await model.train(synthetic_groups(), TrainConfig(kl_penalty_coef=0.1))
        assert "InMemoryBackend" in str(caught.value)
        await model.close()

    asyncio.run(main())
    assert not (tmp_path / "p" / "models" / "m" / "history.jsonl").exists()


class SkippingBackend(InMemoryBackend):
    """Reports two steps further on after one train call."""

    async def get_step(self, run: RunRef) -> int:
        step = await super().get_step(run)
        return step + 1 if step > 0 else step


def test_a_backend_that_skips_a_step_is_named_in_the_error(tmp_path: Path) -> None:
    async def main() -> None:
        model = trainable(tmp_path)
        await model.register(SkippingBackend())
        with pytest.raises(art.BackendError) as caught:
            await model.train(synthetic_groups())
        assert str(caught.value) == (
            "SkippingBackend reported step 2 after training step 0; a train call must advance "
            "the step by exactly one"
        )
        await model.close()

    asyncio.run(main())


def test_a_ledger_damaged_in_the_middle_is_reported_not_read_again(tmp_path: Path) -> None:
    ledger = tmp_path / "p" / "models" / "m" / "history.jsonl"
    ledger.parent.mkdir(parents=True)
    good = json.dumps({"step": 0, "recorded_at": "2025-01-01T00:00:00Z", "x": 1.0})
    ledger.write_text(f"{good}\n{{not json\n{good}\n")

    async def main() -> None:
        model = trainable(tmp_path)
        await model.register(InMemoryBackend())
        with pytest.raises(CorruptDataError):
            await model.train(synthetic_groups())
        await model.close()

    asyncio.run(main())


def test_a_serving_backend_gives_the_model_its_url_and_key(tmp_path: Path) -> None:
    async def main() -> None:
        model = trainable(tmp_path)
        await model.register(ServingBackend())
        assert (model.inference_base_url, model.inference_api_key) == ("http://127.0.0.1:9/v1", "k")
        await model.close()

    asyncio.run(main())


def test_a_trainable_models_state_lives_in_the_run(tmp_path: Path) -> None:
    trainable(tmp_path).overwrite_state({"cursor": 3})
    assert trainable(tmp_path).read_state() == {"cursor": 3}
    states = DictRunState()
    core_trainable(state=states).overwrite_state({"cursor": 4})
    assert states.states == {RunRef(project="p", name="m"): {"cursor": 4}}


def test_a_failed_second_registration_keeps_the_lease_the_first_took(tmp_path: Path) -> None:
    leases = InMemoryRunLeases()

    class BrokenBackend(InMemoryBackend):
        async def register(self, model: ModelSpec) -> None:
            raise OSError("disk full")

    async def main() -> None:
        model = leased_trainable(tmp_path, leases)
        await model.register(InMemoryBackend(one_trainer=True))
        with pytest.raises(OSError, match="disk full"):
            await model.register(BrokenBackend(one_trainer=True))
        assert len(leases.held) == 1
        with pytest.raises(RunBusyError):
            await leased_trainable(tmp_path, leases).register(InMemoryBackend(one_trainer=True))
        await model.close()

    asyncio.run(main())


class KLBackend(InMemoryBackend):
    @property
    def capabilities(self) -> BackendCapabilities:
        return BackendCapabilities(super().capabilities.names | {Capability.KL_PENALTY})


def test_a_kl_reference_step_is_kept_when_old_checkpoints_are_deleted(tmp_path: Path) -> None:
    async def main() -> RetentionDecision:
        model = trainable(tmp_path)
        await model.register(KLBackend())
        await model.train(synthetic_groups())
        await model.train(synthetic_groups(offset=5))
        kl = TrainConfig(kl_penalty_coef=0.1, kl_penalty_reference_step=1)
        await model.train(synthetic_groups(offset=10), kl)
        await model.log(metrics={"reward": 1.0}, split="val")
        decision = await model.delete_checkpoints()
        await model.close()
        return decision

    decision = asyncio.run(main())
    assert decision.kept == (1, 3)
    assert decision.deleted == (0, 2)


class FlakyHistory(InMemoryHistory):
    """Fails its first append of a batch row (a row without `loss/train`)."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    async def report(self, run: RunRef, row: MetricsRow) -> None:
        if "loss/train" not in row.values and self.failures:
            self.failures -= 1
            raise OSError("injected: disk hiccup")
        await super().report(run, row)


class SampleCounter:
    """A mirror that records which batches it was shown, as a dashboard's table would."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, int, int]] = []

    async def report(self, run: RunRef, row: MetricsRow) -> None:
        pass

    async def report_samples(
        self, run: RunRef, split: str, step: int, groups: Sequence[art.TrajectoryGroup]
    ) -> None:
        self.batches.append((split, step, len(groups)))

    async def close(self) -> None:
        pass


def test_a_retried_train_shows_the_mirrors_its_batch_once(tmp_path: Path) -> None:
    counter = SampleCounter()
    groups = synthetic_groups()

    async def main() -> int:
        model = core_trainable(history=FlakyHistory(), mirrors=[counter])
        await model.register(InMemoryBackend())
        with pytest.raises(OSError, match="disk hiccup"):
            await model.train(groups)
        return (await model.train(groups)).step

    assert asyncio.run(main()) == 1
    assert counter.batches == [("train", 0, len(groups))]


class NoStepMetricsBackend(InMemoryBackend):
    """Keeps no metrics with its checkpoints: not a StepMetricsSource."""

    step_metrics = None  # type: ignore[assignment]


def test_a_lost_training_row_is_left_alone_when_the_backend_kept_no_step_metrics() -> None:
    backend = NoStepMetricsBackend()

    async def main() -> list[MetricsRow]:
        first = core_trainable()
        await first.register(backend)
        await first.train(synthetic_groups())
        history = InMemoryHistory()  # the ledger lost the training row of step 1
        second = core_trainable(history=history)
        await second.register(backend)
        assert await second.get_step() == 1
        return list(await history.rows(second.run))

    assert asyncio.run(main()) == []
