"""ART's `backend.train(model, groups, **options)` call: how its arguments and options reach
the model, and what it refuses before anything is trained."""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
from pathlib import Path
from typing import Any

import pytest

import arthex as art
from arthex.core.backend_train import BackendTrainEntry, train_config_from_options
from arthex.core.errors import InvalidInputError
from arthex.testing.builders import make_group
from arthex.testing.fakes.backend import InMemoryBackend
from tests.unit.test_art_model_surface import trainable

ACCEPTED_OPTIONS = {
    # TrainConfig's own fields
    "learning_rate",
    "loss_fn",
    "epsilon",
    "epsilon_high",
    "scale_rewards",
    "kl_penalty_coef",
    "kl_penalty_reference_step",
    "allow_training_without_logprobs",
    "scale_learning_rate_by_reward_std_dev",
    "packed_sequence_length",
    "grad_accumulation_sequences",
    "max_grad_norm",
    "lr_multiplier_window",
    "min_lr_multiplier",
    "max_lr_multiplier",
    "kl_penalty_source",
    "optimizer_save_interval",
    "final_training_step",
    # ART options taken only at ART's default
    "loss_fn_config",
    "adam_params",
    "kl_ref_adapter_path",
    "kl_penalty_step_lag",
    "advantage_balance",
    "importance_sampling_level",
    "max_negative_advantage_importance_sampling_weight",
    "mask_prob_ratio",
    "kimi_k2_tau",
    "truncated_importance_sampling",
    "num_trajectories_learning_rate_multiplier_power",
    "precalculate_logprobs",
    "plot_tensors",
    "save_checkpoint",
    # ART's older names
    "normalize_advantages",
    "ppo",
}


def _groups() -> list[art.TrajectoryGroup]:
    return [make_group((0.0, 1.0), prompt="a"), make_group((1.0, 0.5, 0.0), prompt="b")]


async def _registered(tmp_path: Path) -> tuple[InMemoryBackend, art.TrainableModel]:
    backend = InMemoryBackend()
    model = trainable(tmp_path)
    await model.register(backend)
    return backend, model


def test_an_unset_loss_fn_keeps_the_default_and_the_options_after_it() -> None:
    config = train_config_from_options({"loss_fn": None, "learning_rate": 2e-5})
    assert config == art.TrainConfig(learning_rate=2e-5)


def test_the_older_ppo_switch_picks_ppo_only_when_on_and_no_loss_fn_is_set() -> None:
    assert train_config_from_options({"ppo": True, "loss_fn": None}).loss_fn == "ppo"
    assert train_config_from_options({"loss_fn": None, "ppo": True}).loss_fn == "ppo"
    assert train_config_from_options({"ppo": False}).loss_fn == "cispo"
    assert train_config_from_options({"loss_fn": "cispo", "ppo": True}).loss_fn == "cispo"
    assert (
        train_config_from_options({"ppo": True, "loss_fn": "importance_sampling"}).loss_fn
        == "importance_sampling"
    )
    assert train_config_from_options({"ppo": None, "loss_fn": None}).loss_fn == "cispo"


def test_normalize_advantages_true_keeps_reward_scaling_and_false_turns_it_off() -> None:
    assert train_config_from_options({"normalize_advantages": True}).scale_rewards is True
    assert train_config_from_options({"normalize_advantages": False}).scale_rewards is False


def test_options_at_arts_default_or_none_are_accepted_and_change_nothing() -> None:
    config = train_config_from_options(
        {"kl_penalty_source": None, "advantage_balance": 0.0, "save_checkpoint": True}
    )
    assert config == art.TrainConfig()


def test_an_unknown_option_is_refused_with_every_option_arthex_takes() -> None:
    with pytest.raises(InvalidInputError) as caught:
        train_config_from_options({"learning_rat": 1e-5})
    message = str(caught.value)
    assert "unknown option 'learning_rat'" in message
    listed = re.search(r"\((.*)\)$", message)
    assert listed is not None
    names = listed.group(1).split(", ")
    assert names == sorted(names)
    assert set(names) == ACCEPTED_OPTIONS


def test_a_refused_option_names_its_value_arts_default_and_the_arthex_way() -> None:
    with pytest.raises(InvalidInputError) as caught:
        train_config_from_options({"mask_prob_ratio": True})
    assert str(caught.value) == (
        "train option mask_prob_ratio=True is not supported by arthex (only False): "
        "clip the ratio with epsilon and epsilon_high instead"
    )


def test_the_model_and_groups_may_be_passed_by_keyword(tmp_path: Path) -> None:
    async def main() -> None:
        backend, model = await _registered(tmp_path)
        result = await backend.train(model=model, trajectory_groups=_groups(), learning_rate=3e-5)
        assert result.step == 1
        assert result.metrics["loss/learning_rate"] == pytest.approx(3e-5)

    asyncio.run(main())


def test_verbose_logs_the_step_trained_and_is_not_taken_for_an_option(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        backend, model = await _registered(tmp_path)
        with caplog.at_level(logging.INFO, logger="arthex"):
            await backend.train(model, _groups())
            assert not [r for r in caplog.records if "trained step" in r.getMessage()]
            await backend.train(model, _groups(), verbose=True)
        assert [r.getMessage().split(" in ")[0] for r in caplog.records if "trained" in r.msg] == [
            "trained step 1 -> 2"
        ]

    asyncio.run(main())


def test_a_call_the_model_cannot_take_is_refused_before_anything_is_trained(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        backend, model = await _registered(tmp_path)
        untyped: Any = backend  # as an untyped script calls it
        with pytest.raises(TypeError, match="takes 3 positional arguments but 4 were given"):
            await untyped.train(model, _groups(), 1e-5)  # ART's options are keywords
        with pytest.raises(TypeError, match="missing 1 required positional argument"):
            await untyped.train(model)
        with pytest.raises(TypeError, match="'trajectory_groups'"):
            await untyped.train(model=model)
        with pytest.raises(InvalidInputError, match="registered with this backend, got str"):
            await untyped.train("agent", _groups())
        with pytest.raises(TypeError, match="'model'"):
            await untyped.train(trajectory_groups=_groups())
        assert await model.get_step() == 0

    asyncio.run(main())


def _art_form() -> inspect.Signature:
    """The signature of `backend.train(model, trajectory_groups, *, ...)`, ART's call."""
    return inspect.signature(BackendTrainEntry.train)


def test_the_art_form_names_every_option_it_takes_and_arts_defaults() -> None:
    parameters = _art_form().parameters
    assert list(parameters)[:3] == ["self", "model", "trajectory_groups"]
    keywords = {n for n, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    ignored = {"logprob_calculation_chunk_size"}
    assert keywords == ACCEPTED_OPTIONS | ignored | {"verbose"}
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    # ART 0.5.23's LocalBackend.train defaults
    defaults = {name: parameters[name].default for name in keywords}
    assert {
        k: defaults[k]
        for k in (
            "learning_rate",
            "loss_fn",
            "kl_penalty_source",
            "importance_sampling_level",
            "logprob_calculation_chunk_size",
            "optimizer_save_interval",
            "save_checkpoint",
            "normalize_advantages",
        )
    } == {
        "learning_rate": 5e-6,
        "loss_fn": "cispo",
        "kl_penalty_source": "current_learner",
        "importance_sampling_level": "token",
        "logprob_calculation_chunk_size": 1024,
        "optimizer_save_interval": 5,
        "save_checkpoint": True,
        "normalize_advantages": True,
    }


def test_every_option_passed_at_its_signature_default_trains_with_the_default_config() -> None:
    parameters = _art_form().parameters
    options = {
        name: p.default
        for name, p in parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name != "verbose"
    }
    assert train_config_from_options(options) == art.TrainConfig()
