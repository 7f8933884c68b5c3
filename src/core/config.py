"""The training configuration a user passes to `model.train`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal, Protocol, TypeGuard, TypeVar

import attrs
from pydantic import TypeAdapter, ValidationError

from .errors import InvalidInputError

C = TypeVar("C")
T = TypeVar("T")
LossName = Literal["cispo", "ppo", "importance_sampling"]
LOSSES: tuple[str, ...] = ("cispo", "ppo", "importance_sampling")
KlSource = Literal["current_learner", "sample"]


class CustomLoss(Protocol):
    """A differentiable loss over one sequence's completion tokens: the learner's logprobs
    (with gradient), the sampler's logprobs and the advantages, all 1-D torch tensors of equal
    length; returns a scalar tensor. An optimizer step's loss is the sum over its sequences.
    The Tinker and Local backends take one as `loss_fn`, so a custom loss is portable."""

    def __call__(self, logprobs: Any, sampled_logprobs: Any, advantages: Any, /) -> Any: ...


def finite_number(value: object) -> TypeGuard[int | float]:
    """A real number (not a bool) that is finite, an integer too big for a float included
    (`math.isfinite` raises OverflowError on one: it is not a usable number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {
    kind: TypeAdapter(kind) for kind in (float, int, bool)
}


def _lax(kind: type[T], value: T) -> T:
    """`value` converted as pydantic's lax mode converts a string (`"1e-3"` -> 0.001, `"4"`
    -> 4, `"yes"` -> True), so a config read from a file or the environment is taken as
    `model_validate` takes it. Anything else goes on as it is (a bool is not a number here);
    a string it cannot convert too, for the field's validator to refuse in one line."""
    if not isinstance(value, str):
        return value
    try:
        converted: T = _ADAPTERS[kind].validate_python(value)
    except ValidationError:
        return value
    return converted


# Named converters: attrs' typing reads each one's parameter as the field's __init__ type.
def lax_float(value: float) -> float:
    return _lax(float, value)


def lax_int(value: int) -> int:
    return _lax(int, value)


def lax_bool(value: bool) -> bool:
    return _lax(bool, value)


def lax_optional_float(value: float | None) -> float | None:
    return None if value is None else _lax(float, value)


def lax_optional_int(value: int | None) -> int | None:
    return None if value is None else _lax(int, value)


def _positive_finite(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not finite_number(value) or value <= 0:
        raise InvalidInputError(
            f"TrainConfig.{attribute.name} must be a finite number > 0, got {value!r}"
        )


def _non_negative(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not finite_number(value) or value < 0:
        raise InvalidInputError(
            f"TrainConfig.{attribute.name} must be a finite number >= 0, got {value!r}"
        )


def _optional(check: Any) -> Any:
    def run(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None:
            check(instance, attribute, value)

    return run


def _positive_int(instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(
            f"TrainConfig.{attribute.name} must be an integer >= 1, got {value!r}"
        )


def _non_negative_int(instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(
            f"TrainConfig.{attribute.name} must be an integer >= 0, got {value!r}"
        )


def _kl_source(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    # "sample" measures the KL from the sampler's logprobs; arthex's penalty always compares
    # the policy being trained with the reference, so only that reading is accepted.
    if value != "current_learner":
        raise InvalidInputError(
            f"TrainConfig.kl_penalty_source={value!r} is not supported (only "
            "'current_learner'): arthex's KL penalty compares the current policy with the "
            "reference"
        )


def _loss(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in LOSSES:
        raise InvalidInputError(f"TrainConfig.loss_fn must be one of {LOSSES}, got {value!r}")


@attrs.frozen(kw_only=True)
class TrainConfig:
    """How one `train` call updates the policy. Every value is checked on construction, after
    converting a string as pydantic's lax mode would (`learning_rate="1e-3"` is 0.001).

    Defaults follow ART: learning rate 5e-6, CISPO loss with clip [1-1, 1+4] (PPO: 0.2),
    group-relative advantages scaled by the group's std, no KL penalty.
    """

    learning_rate: float = attrs.field(
        default=5e-6, converter=lax_float, validator=_positive_finite
    )
    loss_fn: LossName = attrs.field(default="cispo", validator=_loss)
    epsilon: float | None = attrs.field(
        default=None, converter=lax_optional_float, validator=_optional(_non_negative)
    )
    epsilon_high: float | None = attrs.field(
        default=None, converter=lax_optional_float, validator=_optional(_non_negative)
    )
    scale_rewards: bool = attrs.field(default=True, converter=lax_bool)
    kl_penalty_coef: float = attrs.field(default=0.0, converter=lax_float, validator=_non_negative)
    kl_penalty_reference_step: int | None = attrs.field(
        default=None, converter=lax_optional_int, validator=_optional(_non_negative_int)
    )
    max_grad_norm: float | None = attrs.field(
        default=1.0, converter=lax_optional_float, validator=_optional(_positive_finite)
    )
    kl_penalty_source: KlSource = attrs.field(default="current_learner", validator=_kl_source)
    grad_accumulation_sequences: int | None = attrs.field(
        default=None, converter=lax_optional_int, validator=_optional(_positive_int)
    )
    packed_sequence_length: int | None = attrs.field(
        default=None, converter=lax_optional_int, validator=_optional(_positive_int)
    )
    allow_training_without_logprobs: bool = attrs.field(default=False, converter=lax_bool)
    # captured rollouts whose agent raised
    train_incomplete_trajectories: bool = attrs.field(default=False, converter=lax_bool)
    scale_learning_rate_by_reward_std_dev: bool = attrs.field(default=False, converter=lax_bool)
    lr_multiplier_window: int | None = attrs.field(
        default=None, converter=lax_optional_int, validator=_optional(_positive_int)
    )
    min_lr_multiplier: float = attrs.field(
        default=0.1, converter=lax_float, validator=_positive_finite
    )
    max_lr_multiplier: float = attrs.field(
        default=10.0, converter=lax_float, validator=_positive_finite
    )
    # How often (in steps) and until which step a trainer that saves optimizer state only
    # now and then saves it. arthex's backends keep it with every checkpoint, so these are
    # checked and recorded but change nothing.
    optimizer_save_interval: int = attrs.field(
        default=5, converter=lax_int, validator=_positive_int
    )
    final_training_step: int | None = attrs.field(
        default=None, converter=lax_optional_int, validator=_optional(_positive_int)
    )

    def __attrs_post_init__(self) -> None:
        if self.min_lr_multiplier > self.max_lr_multiplier:
            raise InvalidInputError(
                f"TrainConfig.min_lr_multiplier ({self.min_lr_multiplier}) is above "
                f"max_lr_multiplier ({self.max_lr_multiplier})"
            )

    @property
    def clip_low(self) -> float:
        """The ratio's lower clip offset: 1.0 for CISPO, 0.2 for PPO, unless `epsilon` is set."""
        if self.epsilon is not None:
            return self.epsilon
        return 1.0 if self.loss_fn == "cispo" else 0.2

    @property
    def clip_high(self) -> float:
        """The ratio's upper clip offset: 4.0 for CISPO, `clip_low` for PPO, unless set."""
        if self.epsilon_high is not None:
            return self.epsilon_high
        return 4.0 if self.loss_fn == "cispo" else self.clip_low

    @classmethod
    def model_validate(cls, value: TrainConfig | Mapping[str, Any]) -> TrainConfig:
        """A TrainConfig from one, or from a mapping of its fields (`{"learning_rate": 1e-5}`),
        as pydantic's `model_validate` takes a dict, converting a string as its lax mode does
        (`"1e-3"` is 0.001): an unknown key or a bad value is refused in one line naming it."""
        return validated_config(cls, value)

    def with_learning_rate(self, learning_rate: float) -> TrainConfig:
        return attrs.evolve(self, learning_rate=learning_rate)

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def validated_config(cls: type[C], value: object) -> C:
    """`value` itself when it is a `cls`, else `cls(**value)` for a mapping of its fields; an
    unknown key, or anything else than a mapping, is refused in one line naming `cls`."""
    if isinstance(value, cls):
        return value
    name = cls.__name__
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f"config must be a {name} or a mapping of its fields, got {type(value).__name__}"
        )
    fields = sorted(a.name for a in attrs.fields(cls) if a.init)  # type: ignore[arg-type]
    for key in value:
        if key not in fields:
            raise InvalidInputError(
                f"{name} has no field {key!r}; its fields are {', '.join(fields)}"
            )
    return cls(**value)
