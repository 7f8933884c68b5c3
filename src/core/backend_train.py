"""`backend.train(model, groups, learning_rate=..., ...)`: ART 0.5.23's training call, on
every arthex backend.

A backend's port method is `train_steps(run, groups, config)`, an async iterator of per-step
metrics that the frontend drives. ART scripts call `train` on the backend with the model and
keyword options instead: this mixin's `train` is that call and nothing else. It hands the
call back to the registered `TrainableModel` (`train_for_backend`), so the frontend keeps
every rule (validation, steps, the history, the learning-rate policy) whichever way training
is called. The options map onto `TrainConfig`; an option arthex does not implement raises an
error that names what to do instead, before anything is trained.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from . import diagnostics
from .capture.training import training_groups
from .config import LossName, TrainConfig
from .errors import InvalidInputError
from .identity import RunRef
from .trajectories import TrajectoryGroup
from .validation import check_finite_values, check_training_groups

if TYPE_CHECKING:
    from ..ports.training_backend import TrainingBackend
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
    "kl_penalty_source": "kl_penalty_source",
    "optimizer_save_interval": "optimizer_save_interval",
    "final_training_step": "final_training_step",
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
    "logprob_calculation_chunk_size",  # memory only: LocalBackend(logprob_calculation_chunk_size=)
}


def train_config_from_options(options: Mapping[str, Any]) -> TrainConfig:
    """The `TrainConfig` for ART-style keyword options, or an error naming what is wrong."""
    fields: dict[str, Any] = {}
    for key, value in options.items():
        if key in ("loss_fn", "kl_penalty_source") and value is None:  # "unset"
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
    """Mixed into a backend: ART's `backend.train(model, trajectory_groups, *, ...)`. The port's
    method, `train_steps(run, groups, config)`, is each backend's own."""

    async def train(
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
    ) -> TrainResult:
        """One update of `model`, a TrainableModel registered with this backend, its metrics
        recorded at the new step and the groups left for the script to log (ART's call);
        returns a TrainResult. The keywords are ART 0.5.23's (docs/migrating-from-art.md):
        those arthex implements set the update's TrainConfig, the others are taken at ART's
        default only."""
        given = dict(locals())  # first: the parameters, every ART option among them
        # the options the caller set: ART's rules read some only when others are left unset
        # (normalize_advantages=False against scale_rewards, ppo=True against loss_fn)
        options = {
            name: value
            for name, value in given.items()
            if name in _ART_DEFAULTS and not _is_default(value, _ART_DEFAULTS[name])
        }
        if not callable(getattr(model, "train_for_backend", None)):
            raise InvalidInputError(
                "train takes a TrainableModel registered with this backend, got "
                f"{type(model).__name__} (the backend port's own method is "
                "train_steps(run, groups, config))"
            )
        config = train_config_from_options(options)
        result = await model.train_for_backend(self, trajectory_groups, config, verbose=verbose)
        return self.train_result(model.run, result)

    def train_result(self, run: RunRef, result: TrainResult) -> TrainResult:
        """What `train` returns for the update of `run` that gave `result`: the result as it
        is here; a backend may return a subclass that adds what it knows of the new step
        (where its checkpoint is kept, the name it is stored under)."""
        return result


def _is_default(value: object, default: object) -> bool:
    return value is default or (type(value) is type(default) and value == default)


# ART's options and their defaults, as `BackendTrainEntry.train` declares them.
_ART_DEFAULTS: dict[str, object] = {
    name: parameter.default
    for name, parameter in inspect.signature(BackendTrainEntry.train).parameters.items()
    if parameter.kind is inspect.Parameter.KEYWORD_ONLY and name != "verbose"
}


def checked_train_steps(
    backend: TrainingBackend,
    run: RunRef,
    groups: Iterable[TrajectoryGroup],
    config: TrainConfig,
) -> AsyncIterator[Mapping[str, float]]:
    """A backend's `train_steps` behind the core's input checks, for callers of the port other
    than the model (which runs the same checks before it writes anything): the groups
    (`check_training_groups`, finite values) and the capabilities the config needs. Backends
    trust their input; the checks run here, once, raising before any step, and so does the
    in-run diagnostics' refusal of a batch with nothing trainable. (What the model
    also does, turning captured trajectories into trainable groups, its client has done
    before it sends them: the servers receive trainable groups.)"""
    checked = check_training_groups(groups, config)
    check_finite_values(checked, training=True)
    backend.capabilities.check(config, type(backend).__name__)
    if diagnostics.enabled():  # a batch with nothing trainable: one line, no step
        diagnostics.check_trainable(training_groups(checked, config))
    return backend.train_steps(run, checked, config)
