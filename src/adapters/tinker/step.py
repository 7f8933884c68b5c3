"""One Tinker optimizer step, and the KL shaping of its advantages: the SDK calls of `train`.

`forward_backward` and `optim_step` are submitted back to back (the service runs one training
client's requests in submission order) and only then awaited, so the step costs one round of
waiting, not two.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ...core.config import CustomLoss, TrainConfig
from ...core.errors import BackendError, InvalidInputError
from .clients import SamplingClientLike, TrainingClientLike, finish, submit

if TYPE_CHECKING:  # the SDK is imported where it is used: importing the backend stays light
    from tinker import types

    from .datums import Batch

TinkerLoss = Literal["importance_sampling", "ppo", "cispo", "dro"]
CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "importance_sampling": (),
    "ppo": ("clip_low_threshold", "clip_high_threshold"),
    "cispo": ("clip_low_threshold", "clip_high_threshold"),
    "dro": ("beta",),
}


def check_loss_config(loss: TinkerLoss, extra: Mapping[str, float]) -> dict[str, float]:
    """`loss_fn_config` checked against what the loss takes (dro needs `beta`)."""
    allowed = CONFIG_KEYS[loss]
    unknown = sorted(set(extra) - set(allowed))
    if unknown:
        raise InvalidInputError(
            f"loss_fn_config keys {unknown} do not apply to loss {loss!r}; it takes {allowed}"
        )
    for key, value in extra.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise InvalidInputError(
                f"loss_fn_config[{key!r}] must be a finite number, got {value!r}"
            )
    if loss == "dro" and not extra.get("beta", 0) > 0:
        raise InvalidInputError("loss 'dro' needs loss_fn_config={'beta': b} with b > 0")
    return {key: float(value) for key, value in extra.items()}


def loss_config(
    loss: TinkerLoss, config: TrainConfig, extra: Mapping[str, float] | None = None
) -> dict[str, float] | None:
    """What Tinker's `loss_fn_config` gets: for PPO and CISPO the ratio thresholds of the clip
    interval `[1 - clip_low, 1 + clip_high]`, with the defaults of the loss that really runs
    (CISPO's [0, 5], PPO's [0.8, 1.2]); then the backend's own `loss_fn_config` over them."""
    found: dict[str, float] = {}
    if loss in ("ppo", "cispo"):
        clips = attrs.evolve(config, loss_fn=loss)
        found = {
            "clip_low_threshold": 1.0 - clips.clip_low,
            "clip_high_threshold": 1.0 + clips.clip_high,
        }
    found.update(extra or {})
    return found or None


async def optimize(
    training: TrainingClientLike,
    batch: Batch,
    loss: TinkerLoss | CustomLoss,
    config: TrainConfig,
    adam: types.AdamParams,
    timeout_s: float | None,
    extra: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """forward_backward (or forward_backward_custom) + optim_step on the batch; the step's
    metrics."""
    import numpy as np

    datums = [part.datum() for part in batch.parts]
    what_backward, what_step = "forward_backward", "optim_step"
    settings = loss_config(loss, config, extra) if isinstance(loss, str) else None
    if isinstance(loss, str):
        backward = await submit(what_backward, training.forward_backward, datums, loss, settings)
    else:
        what_backward = "forward_backward_custom"
        backward = await submit(
            what_backward, training.forward_backward_custom, datums, _sdk_loss(loss, batch)
        )
    stepped = await submit(what_step, training.optim_step, adam)
    output = await finish(what_backward, backward, timeout_s)
    optimizer = await finish(what_step, stepped, timeout_s)
    tokens = batch.trainable_tokens
    ratios, advantages = [], []
    for part, out in zip(batch.parts, output.loss_fn_outputs, strict=True):
        new = np.asarray(out["logprobs"].tolist(), dtype=np.float64)[part.prompt_length - 1 :]
        ratios.append(np.exp(new - part.sampled_logprobs.astype(np.float64)))
        advantages.append(part.advantages.astype(np.float64))
    ratio = np.concatenate(ratios) if ratios else np.ones(1)
    signs = np.concatenate(advantages) if advantages else np.zeros(1)
    metrics = {
        # Tinker sums over tokens; per token it compares with the local backend's loss.
        "loss/train": float(output.metrics.get("loss:sum", math.nan)) / max(tokens, 1),
        "loss/importance_ratio_mean": float(ratio.mean()),
        "loss/importance_ratio_p95": float(np.quantile(ratio, 0.95)),
        "loss/importance_ratio_p99": float(np.quantile(ratio, 0.99)),
        "loss/importance_ratio_max": float(ratio.max()),
        "loss/clipped_token_fraction": _clipped_fraction(loss, settings, ratio, signs),
        "data/step_num_gradient_steps": 1.0,
        "data/step_num_tokens": float(tokens),
        "data/step_num_sequences": float(len(datums)),
    }
    for key, value in {**output.metrics, **(optimizer.metrics or {})}.items():
        if key == "grad_norm":
            metrics["loss/grad_norm"] = float(value)
        elif key not in ("loss:sum", "learning_rate"):
            metrics[f"tinker/{key}"] = float(value)
    return metrics


def _clipped_fraction(
    loss: TinkerLoss | CustomLoss, settings: Mapping[str, float] | None, ratio: Any, signs: Any
) -> float:
    """The share of the trained tokens whose ratio the loss's clip acts on, by the LocalBackend
    trainer's (and ART's) rule: CISPO clips every ratio outside its interval, PPO only one
    above it with a positive advantage or below it with a negative one; the other losses have
    no clip."""
    if loss not in ("ppo", "cispo") or not settings:
        return 0.0
    low, high = settings["clip_low_threshold"], settings["clip_high_threshold"]
    if loss == "ppo":
        acted = ((signs > 0) & (ratio > high)) | ((signs < 0) & (ratio < low))
    else:
        acted = (ratio < low) | (ratio > high)
    return float(acted.mean())


def _sdk_loss(loss: CustomLoss, batch: Batch) -> Any:
    """The SDK's custom loss (data, per-position logprobs) -> (loss, metrics) for `loss`: each
    datum's positions from the first completion token on are the sequence's tokens."""
    import torch

    def run(data: Any, logprobs: list[Any]) -> tuple[Any, dict[str, float]]:
        terms = []
        for part, lp in zip(batch.parts, logprobs, strict=True):
            sampled = torch.from_numpy(part.sampled_logprobs.astype("float32"))
            advantages = torch.from_numpy(part.advantages.astype("float32"))
            terms.append(loss(lp[part.prompt_length - 1 :], sampled, advantages))
        return torch.stack([torch.as_tensor(t).reshape(()) for t in terms]).sum(), {}

    return run


async def kl_penalty(
    reference: SamplingClientLike, batch: Batch, coef: float, timeout_s: float | None
) -> float:
    """Score every datum's tokens under the reference policy and shape the advantages by the
    KL of the sampled tokens to it; returns the batch's mean KL estimate."""
    import numpy as np
    from tinker import types

    from .datums import apply_kl_penalty

    what = "scoring under the KL reference"
    futures = [
        await submit(what, reference.compute_logprobs, types.ModelInput.from_ints(part.tokens))
        for part in batch.parts
    ]
    scored = []
    for part, future in zip(batch.parts, futures):
        values = (await finish(what, future, timeout_s))[part.prompt_length :]
        if len(values) != part.completion_length or any(v is None for v in values):
            raise BackendError("Tinker returned no reference logprob for some sampled tokens")
        scored.append(np.asarray(values, dtype=np.float32))
    return apply_kl_penalty(batch.parts, scored, coef)
