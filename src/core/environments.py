"""An environment someone else wrote, in the core's terms: the examples it offers, and one
rollout of one example against a model, scored by the environment's own rules.

The same value feeds training (`gather_trajectory_groups`, `PipelineTrainer`) and evaluation
(`arthex.evaluate`). Adapters for published environment packages live in
`arthex.environments`; anything with these two methods is an environment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar, runtime_checkable

from .model import Model
from .trajectories import Trajectory

ScenarioT = TypeVar("ScenarioT")


@runtime_checkable
class Environment(Protocol[ScenarioT]):
    """`scenarios(split)` lists the examples of a split (`"train"`, `"val"`, ...); an
    environment without splits returns the same examples for every split.

    `rollout(model, scenario)` runs one episode against the model's OpenAI-compatible
    endpoint and returns its Trajectory with the reward and metrics the environment's own
    scoring set; an episode that fails raises, and the caller counts it the way ART counts
    failed rollouts."""

    def scenarios(self, split: str) -> Sequence[ScenarioT]: ...

    async def rollout(self, model: Model, scenario: ScenarioT) -> Trajectory: ...
