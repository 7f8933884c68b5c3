"""Trajectory groups -> Tinker `Datum`s, one per trained Choice.

Each Choice carries the prompt it was sampled from and its completion (`prompt_token_ids` and
`token_ids`, as arthex's inference server returns them) and the sampler's logprobs. With
`all = prompt + completion` and `P = len(prompt)`, a datum is

    model_input   = all[:-1]
    target_tokens = all[1:]
    logprobs      = [0] * (P-1) + sampled logprobs
    advantages    = [0] * (P-1) + [A] * len(completion)

so position i predicts token i+1 and only completion positions carry signal. `A` is the
group-relative advantage of the Choice's trajectory (`core.advantages.group_advantages`).

Every Choice of a trajectory becomes its own datum, those of `additional_histories` included:
a later Choice's prompt repeats the earlier turns with zero advantage, so nothing is trained
twice. Trajectories whose advantage is 0 send nothing (they would add nothing to the loss).
Bad input is a clear InvalidInputError naming the group, trajectory and Choice; the few
tolerated cases are counted in the returned metrics, never dropped silently.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
from openai.types.chat.chat_completion import Choice
from tinker import types

from ...core.advantages import group_advantages
from ...core.config import TrainConfig
from ...core.errors import InvalidInputError
from ...core.trajectories import TrajectoryGroup


@attrs.define
class DatumParts:
    """One Choice, ready to become a Datum; `advantages` may still be adjusted (KL penalty)."""

    tokens: list[int]  # prompt + completion
    prompt_length: int
    sampled_logprobs: np.ndarray  # float32, one per completion token
    advantages: np.ndarray  # float32, one per completion token

    @property
    def completion_length(self) -> int:
        return len(self.tokens) - self.prompt_length

    def datum(self) -> types.Datum:
        pad = np.zeros(self.prompt_length - 1, np.float32)
        return types.Datum(
            model_input=types.ModelInput.from_ints(self.tokens[:-1]),
            loss_fn_inputs={
                "target_tokens": types.TensorData.from_numpy(
                    np.asarray(self.tokens[1:], dtype=np.int64)
                ),
                "logprobs": types.TensorData.from_numpy(
                    np.concatenate([pad, self.sampled_logprobs]).astype(np.float32)
                ),
                "advantages": types.TensorData.from_numpy(
                    np.concatenate([pad, self.advantages]).astype(np.float32)
                ),
            },
        )


@attrs.frozen
class Batch:
    parts: list[DatumParts]
    counts: dict[str, float]

    @property
    def trainable_tokens(self) -> int:
        return sum(p.completion_length for p in self.parts)


def build_batch(groups: Sequence[TrajectoryGroup], config: TrainConfig) -> Batch:
    """Validate every Choice that will be trained and lay it out as DatumParts."""
    if not groups:
        raise InvalidInputError("train needs at least one trajectory group, got none")
    parts: list[DatumParts] = []
    trajectories = without_choice = skipped_no_logprobs = empty = trainable_groups = 0
    for g, group in enumerate(groups):
        advantages = group_advantages(
            [t.reward for t in group.trajectories], scale=config.scale_rewards
        )
        if any(a != 0.0 for a in advantages):
            trainable_groups += 1
        for t, (trajectory, advantage) in enumerate(zip(group.trajectories, advantages)):
            trajectories += 1
            choices = list(trajectory.choices())
            if not choices:
                without_choice += 1
                continue
            if advantage == 0.0:
                continue
            for c, choice in enumerate(choices):
                where = f"group {g}, trajectory {t}, Choice {c}"
                laid_out = _parts(choice, advantage, where, config)
                if laid_out is None:
                    skipped_no_logprobs += 1
                elif laid_out.completion_length == 0:
                    empty += 1
                else:
                    parts.append(laid_out)
    if trajectories and without_choice == trajectories:
        raise InvalidInputError(
            "no trajectory holds a Choice, so there is nothing to train: append the model's "
            "Choice objects (resp.choices[0]) to messages_and_choices, not plain dict messages"
        )
    counts = {
        "data/step_num_groups_trainable": float(trainable_groups),
        "data/step_num_datums": float(len(parts)),
        "data/step_num_trajectories_without_choice": float(without_choice),
        "data/step_num_choices_without_logprobs": float(skipped_no_logprobs),
        "data/step_num_empty_choices": float(empty),
    }
    return Batch(parts=parts, counts=counts)


def _parts(choice: Choice, advantage: float, where: str, config: TrainConfig) -> DatumParts | None:
    extra: dict[str, Any] = dict(choice.model_extra or {})
    prompt = _token_list(extra.get("prompt_token_ids"), "prompt_token_ids", where)
    completion = _token_list(extra.get("token_ids"), "token_ids", where)
    if not prompt:
        raise InvalidInputError(f"{where}: prompt_token_ids is empty; the prompt must hold a token")
    content = choice.logprobs.content if choice.logprobs is not None else None
    if content is None:
        if config.allow_training_without_logprobs:
            return None
        raise InvalidInputError(
            f"{where}: the Choice has no logprobs. Sample with logprobs=True, or set "
            "TrainConfig(allow_training_without_logprobs=True) to skip such Choices (Tinker's "
            "losses need the sampler's logprobs)"
        )
    logprobs = checked_logprobs([entry.logprob for entry in content], len(completion), where)
    return DatumParts(
        tokens=prompt + completion,
        prompt_length=len(prompt),
        sampled_logprobs=np.asarray(logprobs, dtype=np.float32),
        advantages=np.full(len(completion), advantage, dtype=np.float32),
    )


def checked_logprobs(logprobs: Sequence[float], completion: int, where: str = "") -> list[float]:
    """The sampler's logprobs, one finite number per completion token (InvalidInputError, with
    `where` in front, otherwise)."""
    at = f"{where}: " if where else ""
    if len(logprobs) != completion:
        raise InvalidInputError(
            f"{at}{len(logprobs)} logprobs for {completion} completion tokens; they must match "
            "one to one"
        )
    for index, value in enumerate(logprobs):
        if not math.isfinite(value):
            raise InvalidInputError(f"{at}logprob {index} is {value!r}, not a finite number")
    return list(logprobs)


def _token_list(value: object, field: str, where: str) -> list[int]:
    if value is None:
        raise InvalidInputError(
            f"{where}: the Choice has no {field}; sample it through the backend's inference "
            "endpoint (model.openai_client()), which returns prompt_token_ids and token_ids"
        )
    if not isinstance(value, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value
    ):
        raise InvalidInputError(f"{where}: {field} must be a list of token ids, got {value!r}")
    return list(value)


def apply_kl_penalty(
    parts: Sequence[DatumParts], reference: Sequence[np.ndarray], coef: float
) -> float:
    """Shape advantages by the KL to a reference: `A += coef * (mean(d) - d)` per completion
    token, with `d = sampled - reference` logprob and the mean over the whole batch. Returns
    the mean of d (the batch's KL estimate)."""
    diffs = [p.sampled_logprobs - ref for p, ref in zip(parts, reference, strict=True)]
    total = sum(int(d.size) for d in diffs)
    mean = float(sum(float(d.sum()) for d in diffs) / total) if total else 0.0
    for p, d in zip(parts, diffs):
        p.advantages = (p.advantages + coef * (mean - d)).astype(np.float32)
    return mean
