"""Supervised fine-tuning on Tinker: one `forward_backward` with the `cross_entropy` loss and one
`optim_step` per planned batch.

The conversations are tokenized here, with the chat template the inference server renders
prompts with (inference/sft_tokens.py); each sequence becomes one `Datum` with

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

from ...core.sft import Conversation, PlannedBatch, step_metrics
from ..inference.sft_tokens import SFTSequence, TokenizedData
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


def batch_sequences(
    plan: Sequence[PlannedBatch], data: TokenizedData
) -> list[tuple[list[SFTSequence], float]]:
    """The planned batches' sequences and rates; batches with no target left are skipped."""
    out = []
    for planned in plan:
        sequences = [s for i in planned.items for s in (data.sequences[i] or ())]
        if sum(s.num_targets for s in sequences):
            out.append((sequences, planned.learning_rate))
    return out


async def fine_tune(
    training: TrainingClientLike,
    batches: Sequence[tuple[list[SFTSequence], float]],
    adam: Callable[[float], types.AdamParams],
    conversations: Sequence[Conversation],
    dropped: int,
    timeout_s: float | None,
) -> AsyncIterator[dict[str, float]]:
    """Submit the batches' forward_backward and optim_step requests, up to MAX_IN_FLIGHT
    batches ahead of the one awaited, and yield each step's metrics in order as it finishes."""
    total = sum(s.num_targets for sequences, _ in batches for s in sequences)
    pending: deque[tuple[Awaitable[Any], Awaitable[Any], float]] = deque()
    upcoming = iter(batches)
    while True:
        while len(pending) < MAX_IN_FLIGHT and (batch := next(upcoming, None)) is not None:
            sequences, rate = batch
            backward = await submit(
                "forward_backward (cross_entropy)",
                training.forward_backward,
                datums(sequences),
                "cross_entropy",
            )
            stepped = await submit("optim_step", training.optim_step, adam(rate))
            pending.append((backward, stepped, rate))
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
            conversations=len(conversations),
            trainable_tokens=total,
            dropped=dropped,
            gradient_steps=len(batches),
        )
