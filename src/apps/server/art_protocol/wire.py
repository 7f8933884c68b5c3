"""The ART API's request bodies, parsed and checked before anything is done with them.

ART 0.5.17's client (`art run`'s callers: its own `TrainableModel` through NVIDIA NeMo Agent
Toolkit's `RemoteBackend`) sends the model as its pydantic JSON: `name`, `project`,
`base_model`, `trainable`, the inference fields (filled once prepared), the client's
`base_path` and `_internal_config` (`init_args`, `engine_args`, `trainer_args`, ...). Of those
the server reads the names, the base model and `trainer_args`; `base_path` is the client's
own folder (its history and trajectories) and is ignored (the server owns where checkpoints
live), and the engine and init arguments, GPU settings of ART's Unsloth and vLLM, are
accepted and ignored.

The learning rate: `_internal_config.trainer_args.learning_rate`, when the model carries one,
wins over the request's `config.learning_rate`. NAT's adapter always sends `5e-05` in
`config` (it reads the option from a dict with `getattr`, so the configured value never
reaches it), and the value a NAT user writes under `training:` travels in `trainer_args`.
Without `trainer_args.learning_rate` the request's `config.learning_rate` is used, as ART's
own `TrainableModel.train(config=TrainConfig(learning_rate=...))` expects.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs

from ....core.config import TrainConfig, finite_number
from ....core.errors import InvalidInputError
from ....core.identity import RunRef
from ....core.trajectories import TrajectoryGroup

__all__ = [
    "ART_DEFAULT_LEARNING_RATE",
    "ArtModel",
    "learning_rate_of",
    "parse_groups",
    "parse_model",
    "parse_steps",
    "train_config",
]

logger = logging.getLogger("arthex.art_protocol")

ART_DEFAULT_LEARNING_RATE = 5e-6  # art.types.TrainConfig's default
MAX_BASE_MODEL_LENGTH = 1024
MAX_STEP = 10**9

# Fields ART's Trajectory dumps that arthex's does not keep (ART's policy versions).
_ART_ONLY_TRAJECTORY_FIELDS = ("initial_policy_version", "final_policy_version")

# ART's dev.TrainConfig keys arthex applies, and the TrainConfig field each sets.
_DEV_FIELDS = {
    "allow_training_without_logprobs": "allow_training_without_logprobs",
    "scale_rewards": "scale_rewards",
    "epsilon": "epsilon",
    "epsilon_high": "epsilon_high",
    "kl_penalty_coef": "kl_penalty_coef",
}


@attrs.frozen
class ArtModel:
    """What the server reads of an ART model's JSON."""

    run: RunRef
    base_model: str | None
    trainable: bool
    trainer_args: Mapping[str, Any] = attrs.field(factory=dict)


def _object(payload: object, what: str) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise InvalidInputError(f"{what} must be a JSON object, got {_kind(payload)}")
    return payload


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def parse_model(payload: object, what: str = "the model") -> ArtModel:
    """The model of a request (the whole body of /register and /_get_step, `model` of the
    others); InvalidInputError naming the field that is wrong."""
    body = _object(payload, what)
    for field in ("name", "project"):
        if field not in body:
            raise InvalidInputError(f"{what} has no {field!r}; send the ART model's JSON")
    run = RunRef(project=body["project"], name=body["name"])  # validate_name: safe segments
    trainable = body.get("trainable", False)
    if not isinstance(trainable, bool):
        raise InvalidInputError(f"{what}'s trainable must be true or false, got {trainable!r}")
    base_model = body.get("base_model")
    if base_model is not None and (
        not isinstance(base_model, str)
        or not base_model.strip()
        or len(base_model) > MAX_BASE_MODEL_LENGTH
        or any(ord(c) < 32 for c in base_model)
    ):
        raise InvalidInputError(
            f"{what}'s base_model must be a model name (1-{MAX_BASE_MODEL_LENGTH} printable "
            f"characters), got {base_model!r:.80}"
        )
    if trainable and base_model is None:
        raise InvalidInputError(f"{what} is trainable but has no base_model")
    internal = body.get("_internal_config")
    trainer_args: dict[str, Any] = {}
    if internal is not None:
        internal = _object(internal, f"{what}'s _internal_config")
        found = internal.get("trainer_args")
        if found is not None:
            trainer_args = _object(found, f"{what}'s _internal_config.trainer_args")
    return ArtModel(run=run, base_model=base_model, trainable=trainable, trainer_args=trainer_args)


def _number(value: object, what: str, *, positive: bool = False) -> float:
    if not finite_number(value):
        raise InvalidInputError(f"{what} must be a finite number, got {value!r:.40}")
    if value < 0 or (positive and value == 0):
        raise InvalidInputError(f"{what} must be {'above' if positive else 'at least'} 0")
    return float(value)


def learning_rate_of(model: ArtModel, config: Mapping[str, Any]) -> float:
    """`trainer_args.learning_rate` when the model has one, else `config.learning_rate`,
    else ART's default (see the module docstring)."""
    if "learning_rate" in model.trainer_args and model.trainer_args["learning_rate"] is not None:
        return _number(
            model.trainer_args["learning_rate"],
            "_internal_config.trainer_args.learning_rate",
            positive=True,
        )
    if config.get("learning_rate") is not None:
        return _number(config["learning_rate"], "config.learning_rate", positive=True)
    return ART_DEFAULT_LEARNING_RATE


def train_config(config: object, dev_config: object, model: ArtModel) -> TrainConfig:
    """arthex's TrainConfig of a /_train_model request: ART's `config` (learning_rate,
    kl_penalty_coef), the model's `trainer_args` (learning_rate, max_grad_norm) and the
    `dev_config` keys arthex implements; other dev keys are logged and ignored."""
    given = _object(config if config is not None else {}, "config")
    dev = _object(dev_config if dev_config is not None else {}, "dev_config")
    fields: dict[str, Any] = {"learning_rate": learning_rate_of(model, given)}
    if given.get("kl_penalty_coef") is not None:
        fields["kl_penalty_coef"] = _number(given["kl_penalty_coef"], "config.kl_penalty_coef")
    if model.trainer_args.get("max_grad_norm") is not None:
        fields["max_grad_norm"] = _number(
            model.trainer_args["max_grad_norm"],
            "_internal_config.trainer_args.max_grad_norm",
            positive=True,
        )
    ignored = []
    for key, value in dev.items():
        if key in _DEV_FIELDS and value is not None:
            fields[_DEV_FIELDS[key]] = value
        elif key == "ppo" and value is True:
            fields["loss_fn"] = "ppo"
        elif value is not None:
            ignored.append(key)
    if ignored:
        logger.info("dev_config keys arthex does not apply, ignored: %s", ", ".join(ignored))
    try:
        return TrainConfig(**fields)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"the training config is not valid: {exc}") from None


def parse_groups(payload: object) -> list[TrajectoryGroup]:
    """`trajectory_groups`: ART's TrajectoryGroup JSON (its policy-version fields dropped)."""
    from pydantic import ValidationError

    if not isinstance(payload, list):
        raise InvalidInputError("trajectory_groups must be a JSON list of trajectory groups")
    if not payload:
        raise InvalidInputError("trajectory_groups is empty: there is nothing to train on")
    groups = []
    for index, item in enumerate(payload):
        group = _object(item, f"trajectory_groups[{index}]")
        trajectories = group.get("trajectories")
        if isinstance(trajectories, list):
            group = {
                **group,
                "trajectories": [
                    {k: v for k, v in t.items() if k not in _ART_ONLY_TRAJECTORY_FIELDS}
                    if isinstance(t, dict)
                    else t
                    for t in trajectories
                ],
            }
        try:
            groups.append(TrajectoryGroup.model_validate(group))
        except (ValidationError, TypeError, ValueError) as exc:
            first = str(exc).splitlines()
            detail = "; ".join(line.strip() for line in first[:3])
            message = f"trajectory_groups[{index}] is not a group: {detail}"
            raise InvalidInputError(message) from None
    return groups


def parse_steps(payload: object) -> list[int]:
    """`steps_to_keep`: a list of steps (whole numbers from 0)."""
    if not isinstance(payload, list):
        raise InvalidInputError(f"steps_to_keep must be a list of steps, got {_kind(payload)}")
    steps = []
    for value in payload:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_STEP:
            raise InvalidInputError(f"steps_to_keep holds {value!r}, which is not a step")
        steps.append(value)
    return steps
