"""`backend.train(model, groups, learning_rate=..., ...)`: ART 0.5.23's training call, on
every arthex backend.

A backend's port method is `train(run, groups, config)`, an async iterator of per-step
metrics that the frontend drives. ART scripts call `train` on the backend with the model and
keyword options instead. The mixin's `train` tells the two apart by the first argument: a
`RunRef` goes to the backend's `train_steps`, anything else must be a registered
`TrainableModel`, which is handed the call back (`train_for_backend`): the frontend keeps
every rule (validation, steps, the history, the learning-rate policy) whichever way it is
called. The options map onto `TrainConfig`; an option arthex does not implement raises an
error that names what to do instead, before anything is trained.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, get_overloads, overload

from .config import LossName, TrainConfig
from .errors import InvalidInputError
from .identity import RunRef
from .trajectories import TrajectoryGroup

if TYPE_CHECKING:
    from .model import TrainResult
    from .trainable import TrainableModel

ImportanceSamplingLevel = Literal["token", "sequence", "average", "geometric_average"]

# ART option -> the TrainConfig field it sets (same meaning).
_SAME = {
    "learning_rate": "learning_rate",
    "loss_fn": "loss_fn",
    "epsilon": "epsilon",
    "epsilon_high": "epsilon_high",
    "scale_rewards": "scale_rewards",
    "kl_penalty_coef": "kl_penalty_coef",
    "kl_penalty_reference_step": "kl_penalty_reference_step",
    "allow_training_without_logprobs": "allow_training_without_logprobs",
    "scale_learning_rate_by_reward_std_dev": "scale_learning_rate_by_reward_std_dev",
    "packed_sequence_length": "packed_sequence_length",
    "grad_accumulation_sequences": "grad_accumulation_sequences",
    # arthex's own options, accepted here too
    "max_grad_norm": "max_grad_norm",
    "lr_multiplier_window": "lr_multiplier_window",
    "min_lr_multiplier": "min_lr_multiplier",
    "max_lr_multiplier": "max_lr_multiplier",
}
# ART options whose only supported value is ART's default (None also counts, as ART's
# ServerlessBackend spells some defaults that way); other values are refused with the arthex
# way to get what they ask for.
_ONLY_DEFAULT: dict[str, tuple[object, str]] = {
    "loss_fn_config": (None, "arthex's losses are set by loss_fn, epsilon and epsilon_high"),
    "adam_params": (
        None,
        "set the optimizer on the backend: LocalBackend(adam_betas=..., weight_decay=...)",
    ),
    "kl_ref_adapter_path": (
        None,
        "use kl_penalty_reference_step=<a step of this run> as the KL reference",
    ),
    "kl_penalty_step_lag": (None, "use kl_penalty_reference_step=<a step of this run>"),
    "kl_penalty_source": (
        "current_learner",
        "arthex's KL penalty compares the current policy with the reference",
    ),
    "advantage_balance": (0.0, "arthex's advantages are reward minus the group mean"),
    "importance_sampling_level": ("token", "arthex weighs importance per token"),
    "max_negative_advantage_importance_sampling_weight": (
        None,
        "clip the ratio with epsilon and epsilon_high instead",
    ),
    "mask_prob_ratio": (False, "clip the ratio with epsilon and epsilon_high instead"),
    "kimi_k2_tau": (None, "use loss_fn='cispo', 'ppo' or 'importance_sampling'"),
    "truncated_importance_sampling": (None, "use loss_fn='cispo' (a clipped, detached ratio)"),
    "num_trajectories_learning_rate_multiplier_power": (
        0.0,
        "scale the learning rate yourself, or use scale_learning_rate_by_reward_std_dev",
    ),
    "precalculate_logprobs": (False, "arthex trains on the sampler's logprobs"),
    "plot_tensors": (False, "inspect packed batches with LocalBackend.training_tensors(run)"),
    "save_checkpoint": (
        True,
        "arthex checkpoints every train call (the step advances); delete old ones with "
        "model.delete_checkpoints()",
    ),
}
# ART tuning knobs with no effect on what is learned; arthex decides these itself.
_IGNORED = {
    "logprob_calculation_chunk_size",  # memory only: arthex packs and chunks on its own
    "optimizer_save_interval",  # arthex keeps the optimizer state at every checkpoint
    "final_training_step",  # only decides when ART saves optimizer state
}


def train_config_from_options(options: Mapping[str, Any]) -> TrainConfig:
    """The `TrainConfig` for ART-style keyword options, or an error naming what is wrong."""
    fields: dict[str, Any] = {}
    for key, value in options.items():
        if key == "loss_fn" and value is None:  # ServerlessBackend's "unset"
            continue
        if key in _SAME:
            fields[_SAME[key]] = value
        elif key == "normalize_advantages":  # ART's older name for scale_rewards
            if value is False:
                fields["scale_rewards"] = False
        elif key == "ppo":  # ART's older switch for loss_fn="ppo" (ServerlessBackend)
            if value and options.get("loss_fn") is None:
                fields["loss_fn"] = "ppo"
        elif key in _ONLY_DEFAULT:
            default, instead = _ONLY_DEFAULT[key]
            if value != default and value is not None:
                raise InvalidInputError(
                    f"train option {key}={value!r} is not supported by arthex (only "
                    f"{default!r}): {instead}"
                )
        elif key not in _IGNORED:
            raise InvalidInputError(
                f"train got an unknown option {key!r}; arthex takes ART's options "
                f"({', '.join(sorted([*_SAME, *_ONLY_DEFAULT, 'normalize_advantages', 'ppo']))})"
            )
    return TrainConfig(**fields)


class BackendTrainEntry:
    """Mixed into a backend: `train(run, groups, config)` (the port) and
    `train(model, groups, **options)` (ART's call) on one method."""

    def train_steps(
        self, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        """The port's `train`: the backend's own training, one metrics dict per step."""
        raise NotImplementedError

    @overload
    def train(
        self, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
    ) -> AsyncIterator[Mapping[str, float]]: ...

    @overload
    def train(
        self,
        model: TrainableModel,
        trajectory_groups: Iterable[TrajectoryGroup],
        *,
        # ART 0.5.23's LocalBackend.train, its names and defaults
        learning_rate: float = 5e-6,
        loss_fn: LossName | None = "cispo",
        loss_fn_config: Mapping[str, Any] | None = None,
        normalize_advantages: bool = True,
        adam_params: object | None = None,
        kl_penalty_coef: float = 0.0,
        kl_penalty_reference_step: int | None = None,
        kl_ref_adapter_path: str | None = None,
        kl_penalty_source: Literal["current_learner", "sample"] | None = "current_learner",
        epsilon: float | None = None,
        epsilon_high: float | None = None,
        advantage_balance: float = 0.0,
        scale_rewards: bool = True,
        importance_sampling_level: ImportanceSamplingLevel = "token",
        max_negative_advantage_importance_sampling_weight: float | None = None,
        mask_prob_ratio: bool = False,
        kimi_k2_tau: float | None = None,
        precalculate_logprobs: bool = False,
        allow_training_without_logprobs: bool = False,
        plot_tensors: bool = False,
        truncated_importance_sampling: float | None = None,
        scale_learning_rate_by_reward_std_dev: bool = False,
        logprob_calculation_chunk_size: int = 1024,
        packed_sequence_length: int | None = None,
        num_trajectories_learning_rate_multiplier_power: float = 0.0,
        save_checkpoint: bool = True,
        optimizer_save_interval: int = 5,
        verbose: bool = False,
        # ART's ServerlessBackend's and older ART's
        ppo: bool | None = None,
        kl_penalty_step_lag: int | None = None,
        grad_accumulation_sequences: int | None = None,
        final_training_step: int | None = None,
        # arthex's own
        max_grad_norm: float | None = 1.0,
        lr_multiplier_window: int | None = None,
        min_lr_multiplier: float = 0.1,
        max_lr_multiplier: float = 10.0,
    ) -> Coroutine[Any, Any, TrainResult]: ...

    def train(self, *args: Any, **kwargs: Any) -> Any:
        """`train(run, groups, config)`, the port: an async iterator of per-step metrics.

        `await train(model, trajectory_groups, *, learning_rate=5e-6, loss_fn="cispo", ...)`,
        ART's call: one update of a registered TrainableModel, its metrics recorded at the new
        step, the groups left for the script to log; returns a TrainResult. Its keywords are
        ART 0.5.23's (see the overload, or docs/migrating-from-art.md): those arthex
        implements set the update's TrainConfig, the others are taken at ART's default only.
        `help()` and `inspect.signature` show this ART form, every option named."""
        first = args[0] if args else kwargs.get("run", kwargs.get("model"))
        if isinstance(first, RunRef):
            run, groups, config = _port_arguments(args, kwargs)
            return self.train_steps(run, groups, config)
        return _train_model(self, args, kwargs)


def _art_form() -> inspect.Signature:
    for form in get_overloads(BackendTrainEntry.train):
        signature = inspect.signature(form)
        if "trajectory_groups" in signature.parameters:
            return signature
    raise AssertionError("BackendTrainEntry.train has no ART form")


# What a user reads (help(backend.train), an IDE's hover) is ART's call with every option, not
# `(*args, **kwargs)`; the port form is for backend authors and is in the docstring.
BackendTrainEntry.train.__signature__ = _art_form()  # type: ignore[attr-defined]


def _port_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[RunRef, Sequence[TrajectoryGroup], TrainConfig]:
    names = ("run", "groups", "config")
    values = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if key not in names or key in values:
            raise TypeError(f"train(run, groups, config) got an unexpected argument {key!r}")
        values[key] = value
    missing = [name for name in names if name not in values]
    if missing or len(args) > len(names):
        raise TypeError(f"train(run, groups, config) takes three arguments; missing {missing}")
    return values["run"], values["groups"], values["config"]


async def _train_model(backend: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    options = dict(kwargs)
    positional = list(args)
    model = positional.pop(0) if positional else options.pop("model", None)
    groups = positional.pop(0) if positional else options.pop("trajectory_groups", None)
    if positional:
        raise TypeError("train(model, trajectory_groups, **options) takes its options by keyword")
    if not callable(getattr(model, "train_for_backend", None)):
        raise InvalidInputError(
            f"train takes a RunRef (the backend port) or a TrainableModel registered with this "
            f"backend, got {type(model).__name__}"
        )
    if groups is None:
        raise TypeError("train(model, trajectory_groups) is missing the trajectory groups")
    verbose = bool(options.pop("verbose", False))
    config = train_config_from_options(options)
    return await model.train_for_backend(backend, groups, config, verbose=verbose)
