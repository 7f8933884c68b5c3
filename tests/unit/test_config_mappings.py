"""`model.train(groups, config={...})` and `model.train_sft(..., config={...})` take a mapping
of the config's fields, as pydantic's `model_validate` takes a dict: validated into
TrainConfig / TrainSFTConfig, an unknown key or a value of the wrong kind refused in one line
naming the class and the key, before anything is written. Real files in tmp_path, the
in-memory backend (a verified fake) for the training."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pydantic
import pytest

import arthex as art
from arthex.core.errors import InvalidInputError
from arthex.testing.fakes.backend import InMemoryBackend
from tests.unit.test_art_model_surface import groups, trainable

QA = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]

TRAIN_FIELDS = (
    "allow_training_without_logprobs, epsilon, epsilon_high, final_training_step, "
    "grad_accumulation_sequences, kl_penalty_coef, kl_penalty_reference_step, "
    "kl_penalty_source, learning_rate, loss_fn, lr_multiplier_window, max_grad_norm, "
    "max_lr_multiplier, min_lr_multiplier, optimizer_save_interval, packed_sequence_length, "
    "scale_learning_rate_by_reward_std_dev, scale_rewards, train_incomplete_trajectories"
)


def run_files(tmp_path: Path) -> list[str]:
    root = tmp_path / "proj" / "models" / "agent"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_a_mapping_trains_with_the_values_it_names(tmp_path: Path) -> None:
    async def main() -> None:
        model = trainable(tmp_path)
        await model.register(InMemoryBackend())
        result = await model.train(groups(), config={"learning_rate": 3e-5, "loss_fn": "ppo"})
        assert result.step == 1
        assert result.metrics["loss/learning_rate"] == pytest.approx(3e-5)
        sft = await model.train_sft([QA], config={"learning_rate": 2e-4, "batch_size": 1})
        assert sft.step == 2
        assert sft.metrics["loss/learning_rate"] == pytest.approx(2e-4)
        await model.close()

    asyncio.run(main())


def test_model_validate_takes_a_config_itself_or_a_mapping_of_its_fields() -> None:
    given = art.TrainConfig(learning_rate=1e-4)
    assert art.TrainConfig.model_validate(given) is given
    assert art.TrainConfig.model_validate({"learning_rate": 1e-4}) == given
    assert art.TrainSFTConfig.model_validate({"learning_rate": [1e-4, 2e-4]}) == (
        art.TrainSFTConfig(learning_rate=(1e-4, 2e-4))
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"learning_rat": 1e-5},
            f"TrainConfig has no field 'learning_rat'; its fields are {TRAIN_FIELDS}",
        ),
        (
            {"learning_rate": "fast"},
            "TrainConfig.learning_rate must be a finite number > 0, got 'fast'",
        ),
        (
            [("learning_rate", 1e-5)],
            "config must be a TrainConfig or a mapping of its fields, got list",
        ),
    ],
    ids=["unknown key", "bad value", "not a mapping"],
)
def test_a_bad_mapping_is_refused_in_one_line_before_anything_is_written(
    tmp_path: Path, config: Any, message: str
) -> None:
    async def main() -> None:
        model = trainable(tmp_path)
        await model.register(InMemoryBackend())
        written = run_files(tmp_path)
        with pytest.raises(InvalidInputError) as caught:
            await model.train(groups(), config=config)
        assert str(caught.value) == message
        assert await model.get_step() == 0
        assert run_files(tmp_path) == written
        await model.close()

    asyncio.run(main())


def test_a_bad_sft_mapping_is_refused_naming_train_sft_config(tmp_path: Path) -> None:
    async def main() -> None:
        model = trainable(tmp_path)
        await model.register(InMemoryBackend())
        written = run_files(tmp_path)
        with pytest.raises(InvalidInputError) as caught:
            await model.train_sft([QA], config={"epoch": 2})
        assert str(caught.value).startswith("TrainSFTConfig has no field 'epoch'; its fields")
        assert "\n" not in str(caught.value)
        with pytest.raises(InvalidInputError, match=r"^config must be a TrainSFTConfig"):
            await model.train_sft([QA], config=art.TrainConfig())  # type: ignore[arg-type]
        assert await model.get_step() == 0
        assert run_files(tmp_path) == written
        await model.close()

    asyncio.run(main())


# A pydantic model with TrainConfig's field types: the oracle of how `model_validate` takes
# a string (lax mode), which the docs promise for a mapping.
class PydanticTrainConfig(pydantic.BaseModel):
    learning_rate: float = 5e-6
    epsilon: float | None = None
    kl_penalty_reference_step: int | None = None
    grad_accumulation_sequences: int | None = None
    scale_rewards: bool = True
    allow_training_without_logprobs: bool = False


LAX = [
    {"learning_rate": "1e-3"},
    {"learning_rate": " 2.5e-5 ", "epsilon": "0.3"},
    {"kl_penalty_reference_step": "4", "grad_accumulation_sequences": "16"},
    {"scale_rewards": "false", "allow_training_without_logprobs": "yes"},
    {"scale_rewards": "0", "allow_training_without_logprobs": "on"},
]


@pytest.mark.parametrize("given", LAX)
def test_strings_convert_as_pydantics_model_validate_converts_them(given: dict[str, str]) -> None:
    expected = PydanticTrainConfig.model_validate(given).model_dump(include=set(given))
    for config in (art.TrainConfig.model_validate(given), art.TrainConfig(**given)):  # type: ignore[arg-type]
        assert {key: getattr(config, key) for key in given} == expected


def test_a_train_call_takes_a_learning_rate_written_as_a_string(tmp_path: Path) -> None:
    async def main() -> None:
        model = trainable(tmp_path)
        await model.register(InMemoryBackend())
        result = await model.train(groups(), config={"learning_rate": "1e-3"})
        assert result.metrics["loss/learning_rate"] == pytest.approx(1e-3)
        sft = await model.train_sft([QA], config={"learning_rate": "2e-4", "batch_size": "1"})
        assert sft.metrics["loss/learning_rate"] == pytest.approx(2e-4)
        await model.close()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"learning_rate": "1e-3x"}, "TrainConfig.learning_rate must be a finite number > 0"),
        ({"learning_rate": "inf"}, "TrainConfig.learning_rate must be a finite number > 0"),
        ({"grad_accumulation_sequences": "2.5"}, "grad_accumulation_sequences must be an integer"),
        ({"learning_rate": True}, "TrainConfig.learning_rate must be a finite number > 0"),
    ],
)
def test_a_string_that_is_no_such_value_is_still_refused_naming_the_field(
    given: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message.replace(".", r"\.")):
        art.TrainConfig.model_validate(given)
