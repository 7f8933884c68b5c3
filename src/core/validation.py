"""Checks on what users pass to `log` and `train`, done before anything is written."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from openai.types.chat.chat_completion import Choice

from .config import TrainConfig
from .errors import InvalidInputError
from .trajectories import Trajectory, TrajectoryGroup


def groups_from_log_input(trajectories: Any) -> list[TrajectoryGroup]:
    """`log` takes groups, or trajectories (and exceptions) that form one group, never a mix."""
    if trajectories is None:
        return []
    if isinstance(trajectories, TrajectoryGroup):
        return _awaited([trajectories], "log")
    if isinstance(trajectories, Trajectory):
        return [TrajectoryGroup([trajectories])]
    if isinstance(trajectories, str | bytes) or not isinstance(trajectories, Iterable):
        raise InvalidInputError(
            f"trajectories must be a list of TrajectoryGroup or of Trajectory, got "
            f"{type(trajectories).__name__}"
        )
    items = list(trajectories)
    if not items:
        return []
    if all(isinstance(item, TrajectoryGroup) for item in items):
        return _awaited(items, "log")
    if all(isinstance(item, Trajectory | BaseException) for item in items):
        return [TrajectoryGroup(items)]
    kinds = sorted({type(item).__name__ for item in items})
    raise InvalidInputError(
        "trajectories must be all TrajectoryGroup or all Trajectory (exceptions allowed with "
        f"trajectories), not a mix: got {', '.join(kinds)}"
    )


def check_training_groups(groups: Any, config: TrainConfig) -> list[TrajectoryGroup]:
    """The groups `train` accepts: a non-empty list of TrajectoryGroup whose Choices carry the
    logprobs training needs (unless `allow_training_without_logprobs`)."""
    if isinstance(groups, TrajectoryGroup) or not isinstance(groups, Iterable):
        raise InvalidInputError("train takes a list of TrajectoryGroup")
    items = list(groups)
    if not items:
        raise InvalidInputError("train got an empty list of groups: there is nothing to train on")
    for g, group in enumerate(items):
        if not isinstance(group, TrajectoryGroup):
            raise InvalidInputError(
                f"train takes TrajectoryGroup items only; item {g} is {type(group).__name__} "
                "(wrap trajectories of one scenario in a TrajectoryGroup)"
            )
    _awaited(items, "train")
    n_choices = 0
    missing: list[str] = []
    for g, group in enumerate(items):
        for t, trajectory in enumerate(group.trajectories):
            for c, choice in enumerate(trajectory.choices()):
                n_choices += 1
                if not config.allow_training_without_logprobs and not _has_logprobs(choice):
                    missing.append(f"group {g}, trajectory {t}, choice {c}")
    if missing:
        more = f" (and {len(missing) - 1} more of {n_choices} choices)" if len(missing) > 1 else ""
        raise InvalidInputError(
            f"{missing[0]}{more} has no token logprobs (arthex's servers return them unless a "
            "request says logprobs=False); sample without logprobs=False, or set "
            "allow_training_without_logprobs"
        )
    if n_choices == 0 and any(group.trajectories for group in items):
        raise InvalidInputError(
            "no trajectory holds a Choice: only Choice objects returned by the model are "
            "trained; append the response's choices[0], not a dict copy of its message"
        )
    return items


def check_finite_values(groups: Iterable[TrajectoryGroup], *, training: bool) -> None:
    """Every reward is a finite number, and for training every token logprob too: they become
    tensors, where one NaN turns the weights to NaN. `Trajectory` checks its reward when it is
    built or assigned, but `model_copy(update=...)` and `model_construct` skip validation, so
    `log` and `train` check again where groups come in."""
    for g, group in enumerate(groups):
        for t, trajectory in enumerate(group.trajectories):
            reward = trajectory.reward
            if not _is_finite_number(reward):
                raise InvalidInputError(
                    f"group {g}, trajectory {t} has reward {reward!r}; rewards must be finite "
                    "numbers (a copy made with model_copy(update=...) or model_construct is "
                    "not validated: build the Trajectory, or assign its reward, instead)"
                )
            if not training:
                continue
            for c, choice in enumerate(trajectory.choices()):
                tokens = choice.logprobs.content if choice.logprobs is not None else None
                for k, token in enumerate(tokens or ()):
                    if not _is_finite_number(token.logprob):
                        raise InvalidInputError(
                            f"group {g}, trajectory {t}, choice {c}, token {k} has logprob "
                            f"{token.logprob!r}; a sampled token's logprob is a finite number"
                        )


def _is_finite_number(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _has_logprobs(choice: Choice) -> bool:
    """Logprobs for its sampled tokens; a Choice that sampled no token (its `token_ids` an
    empty list) has all it can have: what is wrong with it is told by the diagnostics."""
    if choice.logprobs is None:
        return False
    if choice.logprobs.content:
        return True
    ids = (choice.model_extra or {}).get("token_ids")
    return isinstance(ids, list) and not ids


def _awaited(groups: list[TrajectoryGroup], call: str) -> list[TrajectoryGroup]:
    """Refuse a group built from rollout awaitables that were never awaited: its rollouts
    would be silently missing."""
    for g, group in enumerate(groups):
        if group.pending:
            raise InvalidInputError(
                f"{call} got group {g} with rollouts not awaited yet; await it first "
                "(`await group`, or pass the groups to `await gather_trajectory_groups(...)`)"
            )
    return groups
