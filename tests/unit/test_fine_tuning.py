"""The fine-tuning use cases of a trained model, with the in-memory fakes: an SFT call's defaults,
what it tells the run's mirrors, its progress line and log line, the step it serves, and
`export` (the format and step it hands the backend, and its refusals); plus the checks of the
config values the use cases start from."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from arthex.core.config import TrainConfig
from arthex.core.errors import InvalidInputError, UnsupportedCapability
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow
from arthex.core.model import ModelPorts
from arthex.core.sft import TrainSFTConfig
from arthex.core.trainable import TrainableModel
from arthex.testing.fakes.backend import InMemoryBackend
from arthex.testing.fakes.history import InMemoryHistory
from arthex.testing.fakes.stores import InMemoryTrajectoryStore

QA = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
OTHER = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "yz"}]


class ConfigMirror:
    """A mirror that keeps every config payload it is told (as the wandb reporter records
    them in the run's config)."""

    def __init__(self) -> None:
        self.configs: list[dict[str, Any]] = []

    async def report(self, run: RunRef, row: MetricsRow) -> None:
        pass

    def update_config(self, run: RunRef, config: Mapping[str, Any]) -> None:
        self.configs.append(dict(config))

    async def close(self) -> None:
        pass


def _model(backend: InMemoryBackend, mirror: ConfigMirror | None = None) -> TrainableModel:
    model = TrainableModel(
        name="m",
        project="p",
        base_model="fake",
        ports=ModelPorts(
            store=InMemoryTrajectoryStore(),
            reporter=InMemoryHistory(),
            mirrors=[mirror] if mirror is not None else [],
        ),
    )
    asyncio.run(model.register(backend))
    return model


# --- train_sft ----------------------------------------------------------------------------


def test_train_sft_without_a_config_trains_at_arts_default_rate_and_records_that_config() -> None:
    mirror = ConfigMirror()
    model = _model(InMemoryBackend(), mirror)
    result = asyncio.run(model.train_sft([QA]))
    assert result.step == 1
    assert result.metrics["loss/learning_rate"] == 5e-5  # ART's TrainSFTConfig default
    recorded = [config["train_sft"] for config in mirror.configs if "train_sft" in config]
    assert recorded == [
        {
            "learning_rate": 5e-5,
            "batch_size": "auto",
            "assistant_turns": "all",
            "epochs": 1,
            "shuffle": False,
            "seed": 42,
            "lr_schedule": "constant",
            "warmup_ratio": 0.0,
            "min_learning_rate": 0.0,
            "max_grad_norm": 1.0,
        }
    ]


def test_the_step_an_sft_call_makes_is_the_one_served_next() -> None:
    model = _model(InMemoryBackend())
    assert model.get_inference_name() == "m@0"
    asyncio.run(model.train_sft([QA]))
    assert model.get_inference_name() == "m@1"  # known without asking the backend again


def test_the_sft_training_time_lies_within_the_call() -> None:
    model = _model(InMemoryBackend())
    before = time.monotonic()
    result = asyncio.run(model.train_sft([QA, OTHER]))
    after = time.monotonic()
    assert 0.0 <= float(result.metrics["time/step_backend_train_s"] or 0.0) <= after - before


def test_the_progress_line_names_the_step_the_sft_call_makes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = _model(InMemoryBackend())
    asyncio.run(model.train_sft([QA], TrainSFTConfig(batch_size=1), progress=True))
    capsys.readouterr()
    asyncio.run(model.train_sft([QA, OTHER], TrainSFTConfig(batch_size=1), progress=True))
    lines = capsys.readouterr().err.split("\r")[1:]
    assert len(lines) == 2  # one update per gradient step
    assert all(line.startswith("sft step 1 -> 2: gradient step ") for line in lines)


def test_verbose_logs_the_step_made_and_quiet_is_the_default(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = _model(InMemoryBackend())
    with caplog.at_level(logging.INFO, logger="arthex"):
        asyncio.run(model.train_sft([QA]))
        assert caplog.messages == []
        asyncio.run(model.train_sft([QA], verbose=True))
    assert len(caplog.messages) == 1
    assert re.fullmatch(r"fine-tuned step 1 -> 2 in \d+\.\ds", caplog.messages[0])


# --- export -------------------------------------------------------------------------------


def _trained_twice(backend: InMemoryBackend) -> TrainableModel:
    model = _model(backend)
    asyncio.run(model.train_sft([QA]))
    asyncio.run(model.train_sft([OTHER]))
    return model


def _exported(folder: Path) -> dict[str, Any]:
    assert [path.name for path in folder.iterdir()] == ["weights.json"]
    payload: dict[str, Any] = json.loads((folder / "weights.json").read_text())
    return payload


def _as_json(weights: Mapping[int, float]) -> dict[str, float]:
    return {str(token): value for token, value in weights.items()}


def test_export_writes_the_step_and_format_asked_into_the_folder_it_returns(
    tmp_path: Path,
) -> None:
    backend = InMemoryBackend(export=True)
    model = _trained_twice(backend)
    step_one = backend.weights(model.run, 1)
    assert step_one != backend.weights(model.run, 2)
    out = tmp_path / "adapter"
    assert asyncio.run(model.export(str(out), step=1, format="peft")) == str(out)
    assert _exported(out) == {"format": "peft", "step": 1, "weights": _as_json(step_one)}


def test_export_defaults_to_the_latest_step_merged(tmp_path: Path) -> None:
    backend = InMemoryBackend(export=True)
    model = _trained_twice(backend)
    out = tmp_path / "merged"
    asyncio.run(model.export(str(out)))
    latest = _as_json(backend.weights(model.run, 2))
    assert _exported(out) == {"format": "merged", "step": 2, "weights": latest}


def test_an_unknown_export_format_is_refused_naming_it_before_the_backend_is_asked(
    tmp_path: Path,
) -> None:
    model = _trained_twice(InMemoryBackend())  # no export either: the format is checked first
    out = tmp_path / "out"
    with pytest.raises(InvalidInputError) as caught:
        asyncio.run(model.export(str(out), format="gguf"))  # type: ignore[arg-type]
    assert str(caught.value) == "format must be 'peft' or 'merged', got 'gguf'"
    assert not out.exists()


def test_export_on_a_backend_without_it_names_the_backend_and_where_runs_are_exported(
    tmp_path: Path,
) -> None:
    model = _trained_twice(InMemoryBackend())
    out = tmp_path / "out"
    with pytest.raises(UnsupportedCapability) as caught:
        asyncio.run(model.export(str(out)))
    assert str(caught.value) == (
        "InMemoryBackend does not support 'export'. Export needs the checkpoints' files: "
        "LocalBackend has them, a training server whose backend has them sends them, and "
        "TinkerBackend downloads them from Tinker"
    )
    assert not out.exists()


def test_the_fake_refuses_a_step_it_does_not_hold_and_a_folder_with_files_in_it(
    tmp_path: Path,
) -> None:
    model = _trained_twice(InMemoryBackend(export=True))
    with pytest.raises(InvalidInputError) as caught:
        asyncio.run(model.export(str(tmp_path / "out"), step=5))
    assert str(caught.value) == "p/m has no checkpoint of step 5; its checkpoints: [0, 1, 2]"
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    with pytest.raises(InvalidInputError, match="is not empty"):
        asyncio.run(model.export(str(used)))
    assert [path.name for path in used.iterdir()] == ["notes.txt"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["used"]  # no partial folder


# --- the config values --------------------------------------------------------------------


@pytest.mark.parametrize("value", [1.5, True, "1.5", "three", -1])  # "3" converts, as pydantic
def test_a_kl_reference_step_must_be_a_whole_number_from_zero(value: Any) -> None:
    with pytest.raises(InvalidInputError) as caught:
        TrainConfig(kl_penalty_reference_step=value)
    assert str(caught.value) == (
        f"TrainConfig.kl_penalty_reference_step must be an integer >= 0, got {value!r}"
    )
    assert TrainConfig(kl_penalty_reference_step=0).kl_penalty_reference_step == 0


@pytest.mark.parametrize("field", ["kl_penalty_coef", "epsilon", "epsilon_high"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), True, "a tenth", -0.5])
def test_a_penalty_or_clip_must_be_a_finite_number_from_zero(field: str, value: Any) -> None:
    with pytest.raises(InvalidInputError) as caught:
        TrainConfig(**{field: value})
    assert str(caught.value) == f"TrainConfig.{field} must be a finite number >= 0, got {value!r}"
    zero: dict[str, Any] = {field: 0.0}
    assert getattr(TrainConfig(**zero), field) == 0.0


def test_equal_lr_multiplier_bounds_pin_the_multiplier_and_crossed_ones_are_refused() -> None:
    pinned = TrainConfig(min_lr_multiplier=2.0, max_lr_multiplier=2.0)
    assert (pinned.min_lr_multiplier, pinned.max_lr_multiplier) == (2.0, 2.0)
    with pytest.raises(InvalidInputError) as caught:
        TrainConfig(min_lr_multiplier=2.5, max_lr_multiplier=2.0)
    assert str(caught.value) == (
        "TrainConfig.min_lr_multiplier (2.5) is above max_lr_multiplier (2.0)"
    )


@pytest.mark.parametrize(
    ("options", "what", "value"),
    [
        ({"learning_rate": True}, "learning_rate", True),
        ({"learning_rate": "fast"}, "learning_rate", "fast"),
        ({"learning_rate": [1e-3, True]}, "learning_rate[1]", True),
        ({"max_grad_norm": True}, "max_grad_norm", True),
    ],
)
def test_an_sft_rate_given_as_a_bool_or_text_is_refused(
    options: dict[str, Any], what: str, value: object
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        TrainSFTConfig(**options)
    low = ">=" if "[" in what else ">"  # a list may end at 0, a schedule's last rate
    assert str(caught.value) == (
        f"TrainSFTConfig.{what} must be a finite number {low} 0, got {value!r}"
    )


def test_a_decaying_sft_schedule_ends_at_the_floor() -> None:
    config = TrainSFTConfig(
        learning_rate=1.0, lr_schedule="linear", min_learning_rate=0.25, batch_size=1
    )
    # three batches: the peak, halfway down, then the floor
    assert [batch.learning_rate for batch in config.plan(3)] == [1.0, 0.625, 0.25]
