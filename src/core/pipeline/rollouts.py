"""What a pipeline calls: rollout and evaluation functions, with ART's shapes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeAlias, TypeVar

from ..errors import InvalidInputError
from ..trainable import TrainableModel
from ..trajectories import Trajectory, TrajectoryGroup, trajectory_group

ModelT = TypeVar("ModelT", bound=TrainableModel)
ScenarioT = TypeVar("ScenarioT")
ConfigT = TypeVar("ConfigT")

# Generic in the model's class, the scenario's and the config's, as ART's are in the last two:
# a rollout written for `arthex.TrainableModel` and `dict` scenarios type-checks as such.
RolloutFn: TypeAlias = Callable[[ModelT, ScenarioT, ConfigT], Awaitable[TrajectoryGroup]]
"""`rollout_fn(model, scenario, config) -> TrajectoryGroup`: every rollout of one scenario."""

SingleRolloutFn: TypeAlias = Callable[[ModelT, ScenarioT, ConfigT], Awaitable[Trajectory]]
"""`single_rollout_fn(model, scenario, config) -> Trajectory`: one rollout."""

EvalResult: TypeAlias = (
    Sequence[Trajectory | TrajectoryGroup] | Mapping[str, Sequence[Trajectory | TrajectoryGroup]]
)
EvalFn: TypeAlias = Callable[[ModelT, int, ConfigT], Awaitable[EvalResult]]
"""`eval_fn(model, step, config)`: trajectories or groups (logged under `val`), or a mapping
from split name to them."""


def make_group_rollout_fn(
    single_rollout_fn: SingleRolloutFn[ModelT, ScenarioT, ConfigT], n: int = 4
) -> RolloutFn[ModelT, ScenarioT, ConfigT]:
    """A RolloutFn that runs `single_rollout_fn` `n` times concurrently on one scenario, with
    `trajectory_group`'s rules: order kept, a rollout that raises an `Exception` becomes an
    exception entry of the group, cancellation and other BaseExceptions propagate."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidInputError(f"n must be an integer >= 1 (rollouts per group), got {n!r}")

    async def group_rollout(model: ModelT, scenario: ScenarioT, config: ConfigT) -> TrajectoryGroup:
        return await trajectory_group(single_rollout_fn(model, scenario, config) for _ in range(n))

    return group_rollout


def eval_groups(result: EvalResult) -> dict[str, list[TrajectoryGroup]]:
    """An eval_fn's result as groups per split: a sequence goes under `val`, loose
    trajectories form one group."""
    splits = result if isinstance(result, Mapping) else {"val": result}
    out: dict[str, list[TrajectoryGroup]] = {}
    for split, items in splits.items():
        groups = [item for item in items if isinstance(item, TrajectoryGroup)]
        loose = [item for item in items if isinstance(item, Trajectory)]
        if len(groups) + len(loose) != len(items):
            kinds = sorted({type(item).__name__ for item in items})
            raise InvalidInputError(
                f"eval_fn returned {kinds} under {split!r}; return Trajectory or "
                "TrajectoryGroup items"
            )
        if loose:
            groups.append(TrajectoryGroup(loose))
        out[split] = groups
    return out
