"""Supervised fine-tuning: its configuration, the conversations it trains on, the batch plan and
learning-rate schedule, and the history rows one SFT call leaves.

Names and meanings follow ART 0.5.23's `TrainSFTConfig` (`learning_rate` a rate or one rate per
batch, `batch_size` an integer or "auto", `assistant_turns` "all" or "last") and its metric
layout: every gradient step is one history row at the new step holding `sft/gradient_step`
(1, 2, ... within the call) and the step's metrics under `sft/`, then one row of their means
under their own names (`loss/train`, ...) with `time/step_backend_train_s`, like an RL step's
training row. The rest of ART's SFT helpers (epochs, shuffling, a warmup-and-decay schedule,
computed over the whole run) are fields here, so one call can hold a whole warm start.

The conversations themselves are checked in conversations.py.

Choices where ART was silent or differed:
- The rows are written after the backend saved the new step, never while it trains: a crash
  mid-update leaves no rows at a step that does not exist. (ART logs each row as it arrives.)
- A call with nothing to train (no conversation, no trained assistant token) is refused before
  anything is written; ART returns without a step. An SFT call that trains is always one step.
- Assistant messages may carry the OpenAI fine-tuning format's `weight` (0 or 1): weight 0 is
  context, not a target. `assistant_turns="last"` trains the last trained assistant message.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs

from .config import lax_bool, lax_float, lax_int, lax_optional_float, validated_config
from .conversations import AssistantTurns
from .errors import InvalidInputError
from .metrics import MetricsRow

Schedule = Literal["constant", "linear", "cosine"]
SCHEDULES: tuple[str, ...] = ("constant", "linear", "cosine")
SFT_PREFIX = "sft"
SFT_GRADIENT_STEP_KEY = "sft/gradient_step"
SFT_TIME_KEY = "time/step_backend_train_s"
DEFAULT_BATCH_SIZE = 2  # ART's "auto" on its local backends


# --- learning-rate schedule ------------------------------------------------------------------


def create_lr_schedule(
    total_steps: int,
    peak_lr: float,
    method: Schedule = "linear",
    warmup_steps: int = 0,
    min_lr: float = 0.0,
) -> list[float]:
    """One learning rate per batch, ART's formula: a linear warmup from `min_lr` to `peak_lr`
    over `warmup_steps` (the first step already above `min_lr`), then constant, linear or cosine
    decay from `peak_lr` to `min_lr` (reached at the last step)."""
    if method not in SCHEDULES:
        raise InvalidInputError(f"schedule method must be one of {SCHEDULES}, got {method!r}")
    if total_steps <= 0:
        return []
    decay_steps = total_steps - warmup_steps
    rates: list[float] = []
    for step in range(total_steps):
        if step < warmup_steps:
            rates.append(min_lr + (peak_lr - min_lr) * (step + 1) / warmup_steps)
            continue
        progress = (step - warmup_steps) / (decay_steps - 1) if decay_steps > 1 else 0.0
        if method == "cosine":
            rates.append(min_lr + (peak_lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress)))
        elif method == "linear":
            rates.append(peak_lr - (peak_lr - min_lr) * progress)
        else:
            rates.append(peak_lr)
    return rates


# --- configuration -----------------------------------------------------------------------------


def _rates(value: float | Sequence[float]) -> float | tuple[float, ...]:
    if isinstance(value, list | tuple):
        return tuple(lax_float(rate) for rate in value)
    return lax_float(value)  # type: ignore[arg-type]  # checked by the validator


def _batch_size(value: int | Literal["auto"]) -> int | Literal["auto"]:
    return "auto" if value == "auto" else lax_int(value)


def _check_rate(value: object, what: str, low: str = ">") -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (low == ">" and value == 0)
    ):
        raise InvalidInputError(
            f"TrainSFTConfig.{what} must be a finite number {low} 0, got {value!r}"
        )


def _int_at_least(low: int) -> Any:
    def check(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidInputError(
                f"TrainSFTConfig.{attribute.name} must be an integer >= {low}, got {value!r}"
            )

    return check


def _one_of(*allowed: str) -> Any:
    def check(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value not in allowed:
            raise InvalidInputError(
                f"TrainSFTConfig.{attribute.name} must be one of {allowed}, got {value!r}"
            )

    return check


@attrs.frozen
class PlannedBatch:
    """One gradient step of an SFT call: which conversations (indices into the call's list,
    in order) and at which learning rate."""

    items: tuple[int, ...]
    learning_rate: float
    epoch: int


@attrs.frozen(kw_only=True)
class TrainSFTConfig:
    """How one `train_sft` call fine-tunes. Every value is checked on construction.

    `learning_rate`: one rate (the peak when a schedule is set) or one rate per batch, as in ART.
    `batch_size`: conversations per gradient step; "auto" is the backend's choice (2, as ART).
    `assistant_turns`: "all" trains every assistant message, "last" only the final one.
    `epochs`: passes over the data; `shuffle` reorders each pass with `Random(seed + epoch)`.
    `lr_schedule`, `warmup_ratio`, `min_learning_rate`: ART's `create_lr_schedule` over all of
    the call's batches, with `int(batches * warmup_ratio)` warmup batches.
    `max_grad_norm`: the gradient is clipped to this norm (ART: 1.0); None does not clip.
    """

    learning_rate: float | tuple[float, ...] = attrs.field(default=5e-5, converter=_rates)
    batch_size: int | Literal["auto"] = attrs.field(default="auto", converter=_batch_size)
    assistant_turns: AssistantTurns = attrs.field(default="all", validator=_one_of("all", "last"))
    epochs: int = attrs.field(default=1, converter=lax_int, validator=_int_at_least(1))
    shuffle: bool = attrs.field(default=False, converter=lax_bool)
    seed: int = attrs.field(default=42, converter=lax_int, validator=_int_at_least(0))
    lr_schedule: Schedule = attrs.field(default="constant", validator=_one_of(*SCHEDULES))
    warmup_ratio: float = attrs.field(default=0.0, converter=lax_float)
    min_learning_rate: float = attrs.field(default=0.0, converter=lax_float)
    max_grad_norm: float | None = attrs.field(default=1.0, converter=lax_optional_float)

    def __attrs_post_init__(self) -> None:
        if isinstance(self.learning_rate, tuple):
            if not self.learning_rate:
                raise InvalidInputError("TrainSFTConfig.learning_rate: the list of rates is empty")
            for index, rate in enumerate(self.learning_rate):
                # a schedule decaying to zero ends there (create_lr_schedule's last rate)
                _check_rate(rate, f"learning_rate[{index}]", low=">=")
            if self.lr_schedule != "constant" or self.warmup_ratio:
                raise InvalidInputError(
                    "TrainSFTConfig: a list of learning rates is already a schedule; leave "
                    "lr_schedule='constant' and warmup_ratio=0, or pass one peak rate"
                )
        else:
            _check_rate(self.learning_rate, "learning_rate")
        if self.batch_size != "auto":
            _int_at_least(1)(self, attrs.fields(TrainSFTConfig).batch_size, self.batch_size)
        if not isinstance(self.shuffle, bool):
            raise InvalidInputError(f"TrainSFTConfig.shuffle must be a bool, got {self.shuffle!r}")
        ratio = self.warmup_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio < 1:
            raise InvalidInputError(
                f"TrainSFTConfig.warmup_ratio must be a number in [0, 1), got {ratio!r}"
            )
        low = self.min_learning_rate
        if isinstance(low, bool) or not isinstance(low, int | float) or not math.isfinite(low):
            raise InvalidInputError(
                f"TrainSFTConfig.min_learning_rate must be a finite number >= 0, got {low!r}"
            )
        if low < 0 or (not isinstance(self.learning_rate, tuple) and low > self.learning_rate):
            raise InvalidInputError(
                f"TrainSFTConfig.min_learning_rate must be in [0, learning_rate], got {low!r}"
            )
        if self.max_grad_norm is not None:
            _check_rate(self.max_grad_norm, "max_grad_norm")

    @classmethod
    def model_validate(cls, value: TrainSFTConfig | Mapping[str, Any]) -> TrainSFTConfig:
        """A TrainSFTConfig from one, or from a mapping of its fields
        (`{"learning_rate": 2e-5, "batch_size": 4}`), as pydantic's `model_validate` takes a
        dict: an unknown key or a bad value is refused in one line naming it."""
        return validated_config(cls, value)

    def resolved_batch_size(self, default: int = DEFAULT_BATCH_SIZE) -> int:
        return default if self.batch_size == "auto" else self.batch_size

    def plan(
        self, n_items: int, default_batch_size: int = DEFAULT_BATCH_SIZE
    ) -> list[PlannedBatch]:
        """The call's gradient steps over `n_items` conversations, in training order."""
        if n_items < 1:
            raise InvalidInputError("train_sft got no conversations: there is nothing to train on")
        size = self.resolved_batch_size(default_batch_size)
        per_epoch = math.ceil(n_items / size)
        total = per_epoch * self.epochs
        rates = self.learning_rates(total, n_items=n_items, batch_size=size)
        batches: list[PlannedBatch] = []
        for epoch in range(self.epochs):
            order = list(range(n_items))
            if self.shuffle:
                random.Random(self.seed + epoch).shuffle(order)
            for start in range(0, n_items, size):
                rate = rates[len(batches)]
                batches.append(PlannedBatch(tuple(order[start : start + size]), rate, epoch))
        return batches

    def learning_rates(self, total: int, *, n_items: int, batch_size: int) -> list[float]:
        if isinstance(self.learning_rate, tuple):
            if len(self.learning_rate) != total:
                raise InvalidInputError(
                    f"TrainSFTConfig.learning_rate lists {len(self.learning_rate)} rates, but the "
                    f"call has {total} batches ({n_items} conversations, batch_size {batch_size}, "
                    f"{self.epochs} epoch(s)); give one rate per batch"
                )
            return [float(rate) for rate in self.learning_rate]
        return create_lr_schedule(
            total,
            float(self.learning_rate),
            self.lr_schedule,
            warmup_steps=int(total * self.warmup_ratio),
            min_lr=float(self.min_learning_rate),
        )

    def to_json(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        if isinstance(self.learning_rate, tuple):
            data["learning_rate"] = list(self.learning_rate)
        return data

    @classmethod
    def from_json(cls, payload: object) -> TrainSFTConfig:
        if payload is None:
            return cls()
        if not isinstance(payload, Mapping):
            raise InvalidInputError(
                f"the SFT config must be a JSON object, got {type(payload).__name__}"
            )
        try:
            return cls(**{str(key): value for key, value in payload.items()})
        except TypeError as exc:
            raise InvalidInputError(
                f"SFT config: {exc}; see TrainSFTConfig for the fields"
            ) from None


# --- the rows ---------------------------------------------------------


def sft_key(key: str) -> str:
    """ART's rule for the `sft` split: a key not already under `sft/` gets the prefix."""
    return key if key.split("/", 1)[0] == SFT_PREFIX else f"{SFT_PREFIX}/{key}"


def sft_rows(step: int, samples: Sequence[Mapping[str, float]]) -> list[MetricsRow]:
    """One row per gradient step at `step`: `sft/gradient_step` (1-based within the call) and
    the step's metrics under `sft/`."""
    rows = []
    for index, sample in enumerate(samples, start=1):
        values: dict[str, float] = {SFT_GRADIENT_STEP_KEY: float(index)}
        values.update({sft_key(key): float(value) for key, value in sample.items()})
        rows.append(MetricsRow(step=step, values=values))
    return rows


def step_metrics(
    *,
    loss: float,
    grad_norm: float,
    learning_rate: float,
    conversations: int,
    trainable_tokens: int,
    dropped: int,
    gradient_steps: int,
) -> dict[str, float]:
    """One gradient step's metrics, as every backend yields them (ART's names): the step's loss,
    gradient norm and rate, and the call's counts (the same on every step of a call)."""
    return {
        "loss/train": float(loss),
        "loss/grad_norm": float(grad_norm),
        "loss/learning_rate": float(learning_rate),
        "data/step_num_trajectories": float(conversations),
        "data/step_trainable_assistant_tokens": float(trainable_tokens),
        "data/step_num_dropped_trajectories": float(dropped),
        "data/step_num_gradient_steps": float(gradient_steps),
    }
