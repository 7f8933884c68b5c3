"""The Environment contract: what arthex needs of an environment, for an adapter of any
environment package (and for a hand-written one). Subclass, override two hooks:

    class TestMyAdapter(EnvironmentContract):
        def environment(self):
            return from_my_package(MyEnv(...))

        def serve(self):
            return served_model()   # an async context manager yielding a Model whose
                                    # endpoint answers for the length of the block

Each test runs in its own event loop (`asyncio.run`): `serve()` is entered inside it, so a
server that lives on the loop (LocalBackend's) works. Set `exact_tokens = False` for an
environment whose trajectories are hand-built rather than captured (they are then checked
for Choices with logprobs instead of recorded calls).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, TypeVar

from ...core.capture.samples import token_samples
from ...core.environments import Environment
from ...core.model import Model
from ...core.trajectories import Trajectory, TrajectoryGroup
from ...environments import as_environment, rollout_fn

T = TypeVar("T")


class EnvironmentContract:
    split: ClassVar[str] = "train"
    """The split whose scenarios the tests roll out."""
    exact_tokens: ClassVar[bool] = True
    """Whether rollouts are captured calls, trained on the sampled token ids."""

    def environment(self) -> Environment[Any]:
        raise NotImplementedError("override `environment()`")

    def serve(self) -> AbstractAsyncContextManager[Model]:
        raise NotImplementedError("override `serve()`")

    def _run(self, check: Callable[[Environment[Any], Model], Awaitable[T]]) -> T:
        async def main() -> T:
            environment = self.environment()
            async with self.serve() as model:
                return await check(environment, model)

        return asyncio.run(main())

    def _scenarios(self, environment: Environment[Any]) -> Sequence[Any]:
        scenarios = environment.scenarios(self.split)
        assert isinstance(scenarios, Sequence), type(scenarios)
        assert len(scenarios) > 0, f"no scenarios in split {self.split!r}"
        return scenarios

    def _check_trajectory(self, trajectory: object) -> None:
        assert isinstance(trajectory, Trajectory), type(trajectory)
        assert math.isfinite(trajectory.reward)
        assert not trajectory.incomplete
        if self.exact_tokens:
            assert trajectory.exchanges.chat_completions, "the rollout recorded no model call"
            samples = token_samples(trajectory, "the rollout")
            assert samples and all(any(sample.trained) for sample in samples)
            for sample in samples:
                trained = [lp for lp, on in zip(sample.logprobs, sample.trained) if on]
                assert all(math.isfinite(lp) for lp in trained), "a sampled token lacks a logprob"
        else:
            choices = list(trajectory.choices())
            assert choices, "the trajectory holds no Choice to train"
            assert all(choice.logprobs is not None for choice in choices)

    def test_it_is_an_environment_and_taken_as_is(self) -> None:
        environment = self.environment()
        assert isinstance(environment, Environment)
        assert as_environment(environment) is environment

    def test_the_scenarios_of_a_split_are_a_stable_sequence(self) -> None:
        environment = self.environment()
        first = self._scenarios(environment)
        again = environment.scenarios(self.split)
        assert len(again) == len(first)

    def test_a_rollout_is_a_scored_trajectory_trainable_as_sampled(self) -> None:
        async def check(environment: Environment[Any], model: Model) -> list[Trajectory]:
            scenarios = self._scenarios(environment)[:2]
            return [await environment.rollout(model, scenario) for scenario in scenarios]

        for trajectory in self._run(check):
            self._check_trajectory(trajectory)

    def test_concurrent_rollouts_of_one_scenario_form_one_group(self) -> None:
        async def check(environment: Environment[Any], model: Model) -> TrajectoryGroup:
            scenario = self._scenarios(environment)[0]
            group_of = rollout_fn(environment, n=3)
            return await group_of(model, scenario, None)  # type: ignore[arg-type]

        group = self._run(check)
        assert isinstance(group, TrajectoryGroup)
        assert not group.exceptions, [e.message for e in group.exceptions]
        assert len(group.trajectories) == 3
        assert len({id(t) for t in group.trajectories}) == 3
        for trajectory in group.trajectories:
            self._check_trajectory(trajectory)
