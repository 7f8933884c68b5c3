"""ART's trajectory-to-Datum conversions for Tinker (`art.tinker_native.data`), on the datums
TinkerBackend itself trains on (datums.py).

- `trajectory_groups_to_datums(groups)`: the Datums `TinkerBackend.train` would send for the
  groups: one per trained Choice, from the token ids the Choice was sampled with
  (`prompt_token_ids`, `token_ids`) and its logprobs, with the group-relative advantage.
- `build_datum(prompt, completion, logprobs, advantage)`: one such Datum from its parts.
- `compute_advantages(rewards, normalize_advantages)`: the group-relative advantages.
- `iter_trajectory_histories(trajectory)`: its main conversation as a History, then its
  additional histories.

A Datum holds `model_input = all[:-1]` and, as loss inputs, `target_tokens = all[1:]` and the
sampled logprobs and advantages, zero over the prompt's first P-1 positions (`all` the prompt's
P tokens and then the completion's): ready for `forward_backward` with Tinker's losses.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence

from ...core.advantages import group_advantages
from ...core.config import TrainConfig
from ...core.errors import InvalidInputError, require_extra
from ...core.trajectories import History, Trajectory, TrajectoryGroup

require_extra("tinker", "tinker", "numpy")  # without the SDK: the extra to install, in one line

import numpy as np  # noqa: E402
from tinker import types  # noqa: E402

from .datums import DatumParts, build_batch, checked_logprobs  # noqa: E402

__all__ = [
    "build_datum",
    "compute_advantages",
    "iter_trajectory_histories",
    "trajectory_groups_to_datums",
]


def compute_advantages(rewards: Sequence[float], normalize_advantages: bool = True) -> list[float]:
    """`r - mean(rewards)`, divided by the population std (+ 1e-6) when `normalize_advantages`;
    all 0.0 when the rewards are all equal (within 1e-12) or fewer than two."""
    return group_advantages(list(rewards), scale=normalize_advantages)


def build_datum(
    prompt_tokens: Sequence[int],
    completion_tokens: Sequence[int],
    logprobs: Sequence[float],
    advantage: float,
) -> types.Datum | None:
    """The Datum that trains `completion_tokens` (sampled after `prompt_tokens` with
    `logprobs`) with `advantage`; None when the prompt or the completion is empty."""
    if not prompt_tokens or not completion_tokens:
        return None
    tokens = [*_ids(prompt_tokens, "prompt_tokens"), *_ids(completion_tokens, "completion_tokens")]
    values = checked_logprobs([float(v) for v in logprobs], len(completion_tokens))
    if not math.isfinite(advantage):
        raise InvalidInputError(f"advantage is {advantage!r}, not a finite number")
    return DatumParts(
        tokens=tokens,
        prompt_length=len(prompt_tokens),
        sampled_logprobs=np.asarray(values, dtype=np.float32),
        advantages=np.full(len(completion_tokens), advantage, dtype=np.float32),
    ).datum()


def trajectory_groups_to_datums(
    trajectory_groups: Iterable[TrajectoryGroup],
    renderer: object = None,
    tokenizer: object = None,
    normalize_advantages: bool = True,
    *,
    base_model: str | None = None,
    model: object = None,
) -> list[types.Datum]:
    """The Datums TinkerBackend trains on for these groups: one per Choice of every trajectory
    whose advantage is not 0 (its additional histories' Choices too).

    `renderer`, `tokenizer` and `base_model` (ART renders or tokenizes each prompt again) are
    not needed: every Choice carries the ids it was sampled with. A Choice without them, or
    without logprobs, is an InvalidInputError naming it. `model` (ART's pick of one model's
    calls in a trajectory that recorded several) is refused: every Choice is trained."""
    if model is not None:
        raise InvalidInputError(
            f"model={model!r}: arthex trains every Choice of a trajectory; keep only the "
            "trajectories (or Choices) of the model to train in the groups you pass"
        )
    groups = list(trajectory_groups)
    if not groups:
        return []
    config = TrainConfig(scale_rewards=normalize_advantages)
    return [part.datum() for part in build_batch(groups, config).parts]


def iter_trajectory_histories(trajectory: Trajectory) -> Iterator[History]:
    """The trajectory's main conversation (its messages and choices, and its tools) as a
    History, then each of its `additional_histories`."""
    yield History(messages_and_choices=trajectory.messages_and_choices, tools=trajectory.tools)
    yield from trajectory.additional_histories


def _ids(tokens: Sequence[int], what: str) -> list[int]:
    ids = list(tokens)
    for token in ids:
        if isinstance(token, bool) or not isinstance(token, int | np.integer) or token < 0:
            raise InvalidInputError(f"{what} must be token ids (integers >= 0), got {token!r}")
    return [int(token) for token in ids]
