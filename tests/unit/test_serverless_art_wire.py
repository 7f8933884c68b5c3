"""The hosted serverless API's wire as arthex's two ends speak it: the inference names
(`wandb-artifact:///{entity}/{project}/{name}[:step{N}]`), a gradient step's flat metrics,
and a TrainConfig sent as `experimental_config` (ART's option names) and read back by the
server as the same TrainConfig. The server's routes against ART's own client are in
tests/interop/test_art_serverless.py."""

from __future__ import annotations

import math

import pytest

from arthex.adapters.serverless import wire
from arthex.adapters.serverless.client import experimental_config
from arthex.apps.server.runner import experimental_config as read_experimental_config
from arthex.core.config import TrainConfig
from arthex.core.errors import InvalidInputError
from arthex.ports.training_backend import InferenceEndpoint

# The keys of ART 0.5.23's ExperimentalTrainingConfig (art/serverless/client.py), which its
# ServerlessBackend sends every one of.
ART_KEYS = {  # the same set as wire.TRAIN_OPTIONS, written down from the wheel
    "advantage_balance", "allow_training_without_logprobs", "epsilon", "epsilon_high",
    "importance_sampling_level", "kimi_k2_tau", "kl_penalty_coef", "kl_penalty_reference_step",
    "kl_penalty_source", "kl_penalty_step_lag", "kl_ref_adapter_path", "learning_rate",
    "logprob_calculation_chunk_size", "loss_fn", "mask_prob_ratio",
    "max_negative_advantage_importance_sampling_weight", "normalize_advantages",
    "num_trajectories_learning_rate_multiplier_power", "packed_sequence_length", "plot_tensors",
    "ppo", "precalculate_logprobs", "scale_learning_rate_by_reward_std_dev", "scale_rewards",
    "truncated_importance_sampling",
}  # fmt: skip


def test_the_wire_names_every_option_of_arts_experimental_config() -> None:
    assert wire.TRAIN_OPTIONS == ART_KEYS


def test_artifact_names_read_back() -> None:
    assert wire.artifact_name("team", "proj", "run-1") == "wandb-artifact:///team/proj/run-1"
    assert (
        wire.artifact_name("team", "proj", "run-1", 3) == "wandb-artifact:///team/proj/run-1:step3"
    )
    assert wire.parse_artifact_name("wandb-artifact:///team/proj/run-1:step12") == (
        "team", "proj", "run-1", 12
    )  # fmt: skip
    for bad in ("run-1@3", "wandb-artifact:///team/run-1", "wandb-artifact:///t/p/n:stepx"):
        assert wire.parse_artifact_name(bad) is None


def test_an_endpoint_names_and_reads_its_steps_in_its_own_format() -> None:
    served = InferenceEndpoint(
        "http://h/v1", "k", "wandb-artifact:///t/p/n", step_format="{name}:step{step}"
    )
    assert served.name_at(4) == "wandb-artifact:///t/p/n:step4"
    assert served.step_of("wandb-artifact:///t/p/n:step4") == 4
    assert served.step_of("wandb-artifact:///t/p/other:step4") is None
    assert served.step_of("wandb-artifact:///t/p/n") is None
    plain = InferenceEndpoint("http://h/v1", "k", "agent")
    assert (plain.name_at(2), plain.step_of("agent@2"), plain.step_of("agent@x")) == (
        "agent@2",
        2,
        None,
    )


def test_gradient_step_metrics_are_flat_and_non_finite_ones_survive_json() -> None:
    sent = wire.encode_event_metrics({"loss": 0.5, "a": math.nan, "b": math.inf, "c": -math.inf})
    assert sent == {"loss": 0.5, "a": "NaN", "b": "Infinity", "c": "-Infinity"}
    assert all(isinstance(float(v), float) for v in sent.values())  # what ART's client does
    back = wire.decode_event_metrics(sent)
    assert back["loss"] == 0.5 and math.isnan(back["a"]) and back["b"] == math.inf
    assert back["c"] == -math.inf


@pytest.mark.parametrize(
    "config",
    [
        TrainConfig(),
        TrainConfig(learning_rate=3e-5, loss_fn="ppo", epsilon=0.1, epsilon_high=0.3),
        TrainConfig(scale_rewards=False, kl_penalty_coef=0.1, kl_penalty_reference_step=2),
        TrainConfig(max_grad_norm=None, lr_multiplier_window=4, train_incomplete_trajectories=True),
        TrainConfig(
            loss_fn="importance_sampling", optimizer_save_interval=2, packed_sequence_length=64
        ),
    ],
)
def test_a_config_sent_as_experimental_config_is_read_back_as_the_same(config: TrainConfig) -> None:
    sent = experimental_config(config)
    assert set(sent) >= ART_KEYS
    assert read_experimental_config(sent) == config


def test_arts_defaults_are_arthexs_defaults_and_its_other_options_are_refused() -> None:
    arts = {key: None for key in ART_KEYS} | {"learning_rate": 5e-6, "loss_fn": "cispo"}
    assert read_experimental_config(arts) == TrainConfig()
    with pytest.raises(InvalidInputError, match="kl_penalty_source='sample'"):
        read_experimental_config({**arts, "kl_penalty_coef": 0.1, "kl_penalty_source": "sample"})
    with pytest.raises(InvalidInputError, match=r"advantage_balance=0\.5"):
        read_experimental_config({**arts, "advantage_balance": 0.5})
    with pytest.raises(InvalidInputError, match="experimental_config must be a JSON object"):
        read_experimental_config([1])
