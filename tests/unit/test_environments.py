"""`arthex.environments` without its extras (the main venv has neither verifiers nor openenv):
what it takes, what it refuses in one line, the extra it names, and the session scopes the
verifiers adapter records through."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

import arthex
from arthex.core.capture.endpoints import EndpointFilter
from arthex.core.capture.scope import (
    bind_session,
    close_session_scope,
    open_session_scope,
    recorder_for,
)
from arthex.core.errors import InvalidInputError, MissingExtraError
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.environments import Environment, as_environment, from_openenv, from_verifiers
from arthex.environments import rollout_fn as environment_rollout_fn

URL = "http://127.0.0.1:8000/v1"


class Counting:
    """An Environment of this test's own: the reward is the scenario."""

    def scenarios(self, split: str) -> Sequence[int]:
        return [1, 2, 3] if split == "train" else [4]

    async def rollout(self, model: Any, scenario: int) -> Trajectory:
        if scenario < 0:
            raise RuntimeError("negative")
        return Trajectory(reward=float(scenario))


def test_an_environment_is_taken_as_it_is() -> None:
    environment = Counting()
    assert isinstance(environment, Environment)
    assert as_environment(environment) is environment


@pytest.mark.parametrize("value", [3, "verifiers", object(), Counting])
def test_anything_else_is_refused_in_one_line_naming_its_type(value: object) -> None:
    with pytest.raises(InvalidInputError, match="expected an arthex Environment") as caught:
        as_environment(value)
    message = str(caught.value)
    assert "\n" not in message
    kind = type(value)
    assert f"{kind.__module__}.{kind.__qualname__}" in message


def test_a_verifiers_environment_without_verifiers_names_the_extra() -> None:
    # a class that says it is verifiers' Env, as an environment built by verifiers would
    fake_env = type("Env", (), {"__module__": "verifiers.v1.env"})
    with pytest.raises(MissingExtraError, match=r"verifiers is not installed.*\[envs\]"):
        as_environment(fake_env())
    with pytest.raises(MissingExtraError, match=r"\[envs\]"):
        from_verifiers(fake_env())


def test_from_openenv_without_openenv_names_the_extra() -> None:
    with pytest.raises(MissingExtraError, match=r"openenv-core is not installed.*\[envs\]"):
        from_openenv(Counting, scenarios=[{}], prompt=str, action=str)


def test_rollout_fn_makes_groups_of_n_and_keeps_failures_as_exception_entries() -> None:
    group_of = environment_rollout_fn(Counting(), n=3)
    group: TrajectoryGroup = asyncio.run(group_of(None, 2, None))  # type: ignore[arg-type]
    assert isinstance(group, TrajectoryGroup)
    assert [t.reward for t in group.trajectories] == [2.0, 2.0, 2.0]
    failed: TrajectoryGroup = asyncio.run(group_of(None, -1, None))  # type: ignore[arg-type]
    assert not failed.trajectories and len(failed.exceptions) == 3
    assert failed.exceptions[0].message == "negative"


def test_rollout_fn_refuses_a_bad_n_and_a_non_environment() -> None:
    with pytest.raises(InvalidInputError, match="n must be an integer >= 1"):
        environment_rollout_fn(Counting(), n=0)
    with pytest.raises(InvalidInputError, match=r"builtins\.dict"):
        environment_rollout_fn({}, n=2)


def test_the_environments_feed_gather_trajectory_groups() -> None:
    environment = Counting()
    group_of = environment_rollout_fn(environment, n=2)

    async def main() -> list[TrajectoryGroup]:
        return await arthex.gather_trajectory_groups(
            group_of(None, scenario, None)  # type: ignore[arg-type]
            for scenario in environment.scenarios("train")
        )

    groups = asyncio.run(main())
    assert [[t.reward for t in g.trajectories] for g in groups] == [[1, 1], [2, 2], [3, 3]]


def test_a_session_scope_takes_the_calls_of_its_sessions_from_any_context() -> None:
    scope = open_session_scope(None, EndpointFilter([URL]))
    bind_session(scope, "trace-1")
    try:
        assert recorder_for("POST", URL + "/chat/completions", "trace-1") is scope
        assert recorder_for("POST", URL + "/chat/completions", "trace-2") is None
        assert recorder_for("POST", URL + "/chat/completions", None) is None
        assert recorder_for("GET", URL + "/chat/completions", "trace-1") is None
        # another endpoint's calls are not its own, even with its session id
        assert recorder_for("POST", "http://127.0.0.1:9/v1/chat/completions", "trace-1") is None
        # a second scope cannot take a session already bound
        other = open_session_scope(None, EndpointFilter([URL]))
        with pytest.raises(InvalidInputError, match="already bound"):
            bind_session(other, "trace-1")
        close_session_scope(other, None)
        with pytest.raises(InvalidInputError, match="non-empty string"):
            bind_session(scope, "")
    finally:
        close_session_scope(scope, None)
    assert recorder_for("POST", URL + "/chat/completions", "trace-1") is None
    assert not scope.open and scope.trajectory.metrics["duration"] >= 0
    close_session_scope(scope, None)  # twice is harmless
