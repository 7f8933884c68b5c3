"""One Tinker optimizer step, and the KL shaping of its advantages: the SDK calls of `train`.

`forward_backward` and `optim_step` are submitted back to back (the service runs one training
client's requests in submission order) and only then awaited, so the step costs one round of
waiting, not two.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

import attrs

from ...core.config import TrainConfig
from ...core.errors import BackendError
from .clients import SamplingClientLike, TrainingClientLike, finish, submit

if TYPE_CHECKING:  # the SDK is imported where it is used: importing the backend stays light
    from tinker import types

    from .datums import Batch

TinkerLoss = Literal["importance_sampling", "ppo", "cispo"]


def loss_config(loss: TinkerLoss, config: TrainConfig) -> dict[str, float] | None:
    """Tinker's ratio thresholds for the clip interval `[1 - clip_low, 1 + clip_high]`, with
    the defaults of the loss that really runs (CISPO's [0, 5], PPO's [0.8, 1.2])."""
    if loss == "importance_sampling":
        return None
    clips = attrs.evolve(config, loss_fn=loss)
    return {
        "clip_low_threshold": 1.0 - clips.clip_low,
        "clip_high_threshold": 1.0 + clips.clip_high,
    }


async def optimize(
    training: TrainingClientLike,
    batch: Batch,
    loss: TinkerLoss,
    config: TrainConfig,
    adam: types.AdamParams,
    timeout_s: float | None,
) -> dict[str, float]:
    """forward_backward + optim_step on the batch; the step's metrics."""
    import numpy as np

    datums = [part.datum() for part in batch.parts]
    what_backward, what_step = "forward_backward", "optim_step"
    backward = await submit(
        what_backward, training.forward_backward, datums, loss, loss_config(loss, config)
    )
    stepped = await submit(what_step, training.optim_step, adam)
    output = await finish(what_backward, backward, timeout_s)
    optimizer = await finish(what_step, stepped, timeout_s)
    tokens = batch.trainable_tokens
    ratios = []
    for part, out in zip(batch.parts, output.loss_fn_outputs, strict=True):
        new = np.asarray(out["logprobs"].tolist(), dtype=np.float64)[part.prompt_length - 1 :]
        ratios.append(np.exp(new - part.sampled_logprobs.astype(np.float64)))
    ratio = np.concatenate(ratios) if ratios else np.ones(1)
    metrics = {
        # Tinker sums over tokens; per token it compares with the local backend's loss.
        "loss/train": float(output.metrics.get("loss:sum", math.nan)) / max(tokens, 1),
        "loss/importance_ratio_mean": float(ratio.mean()),
        "loss/importance_ratio_max": float(ratio.max()),
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
