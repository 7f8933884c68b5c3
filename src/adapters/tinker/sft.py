"""Supervised fine-tuning on Tinker: one `forward_backward` with the `cross_entropy` loss and one
`optim_step` per planned batch.

The conversations are tokenized with the chat template the inference server renders prompts
with (inference/sft_tokens.py); each sequence becomes one `Datum` with

    model_input   = tokens[:-1]
    target_tokens = tokens[1:]
    weights       = target[1:] / (the batch's target tokens)

so Tinker's summed loss, `-Σ logprob·weight`, is the batch's mean token cross-entropy (ART's
normalisation, and the local backend's). Batches are submitted up to MAX_IN_FLIGHT ahead of
the one awaited: the service runs one training client's requests in order, so it never waits
on a round trip between batches, and each batch's metrics are yielded as its step finishes.

Tinker keeps one Adam state per training run, so unlike the local backend the optimizer state
carries over between RL and SFT steps; weight decay and betas are the backend's.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.sft import step_metrics
from ..inference.sft_tokens import SFTData, SFTSequence
from .clients import TrainingClientLike, finish, submit

if TYPE_CHECKING:
    from tinker import types

MAX_IN_FLIGHT = 8  # batches submitted ahead: the service stays busy, a long call stays bounded


def datums(sequences: Sequence[SFTSequence]) -> list[types.Datum]:
    """One cross-entropy datum per sequence, weighted to a mean over the batch's targets."""
    from tinker import types

    total = sum(s.num_targets for s in sequences)
    out = []
    for sequence in sequences:
        weights = np.asarray(sequence.targets[1:], dtype=np.float32) / max(total, 1)
        out.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(list(sequence.tokens[:-1])),
                loss_fn_inputs={
                    "target_tokens": types.TensorData.from_numpy(
                        np.asarray(sequence.tokens[1:], dtype=np.int64)
                    ),
                    "weights": types.TensorData.from_numpy(weights),
                },
            )
        )
    return out


async def fine_tune(
    training: TrainingClientLike,
    data: SFTData,
    adam: Callable[[float], types.AdamParams],
    timeout_s: float | None,
) -> AsyncIterator[dict[str, float]]:
    """Submit the batches' forward_backward and optim_step requests, up to MAX_IN_FLIGHT
    batches ahead of the one awaited, and yield each step's metrics in order as it finishes."""
    pending: deque[tuple[Awaitable[Any], Awaitable[Any], float]] = deque()
    upcoming = iter(data.batches)
    while True:
        while len(pending) < MAX_IN_FLIGHT and (batch := next(upcoming, None)) is not None:
            backward = await submit(
                "forward_backward (cross_entropy)",
                training.forward_backward,
                datums(batch.sequences),
                "cross_entropy",
            )
            stepped = await submit("optim_step", training.optim_step, adam(batch.learning_rate))
            pending.append((backward, stepped, batch.learning_rate))
        if not pending:
            return
        backward, stepped, rate = pending.popleft()
        output: types.ForwardBackwardOutput = await finish(
            "forward_backward (cross_entropy)", backward, timeout_s
        )
        optimizer: types.OptimStepResponse = await finish("optim_step", stepped, timeout_s)
        extra = {**output.metrics, **(optimizer.metrics or {})}
        yield step_metrics(
            loss=float(output.metrics.get("loss:sum", math.nan)),
            grad_norm=float(extra.get("grad_norm", math.nan)),
            learning_rate=rate,
            conversations=data.conversations,
            trainable_tokens=data.num_targets,
            dropped=data.dropped,
            gradient_steps=len(data.batches),
        )
