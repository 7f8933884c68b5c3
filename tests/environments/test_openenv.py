"""`from_openenv` against an OpenEnv environment of the test's own (openenv-core ships no
environment that runs without Docker or a Hub download: its environments are separate
packages and Spaces), played in-process and through a local server built with OpenEnv's own
`create_fastapi_app` and reached with its `GenericEnvClient`, against LocalBackend's served
tiny model: the environment's step rewards arrive summed, the ids trained are the ids sampled,
and the Environment contract holds for both.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from openenv.core import GenericEnvClient
from openenv.core.env_server import Environment as OpenEnvBase
from openenv.core.env_server import create_fastapi_app
from openenv.core.env_server.types import Action, Observation, State

import arthex
from arthex.core.capture import token_samples
from arthex.core.environments import Environment
from arthex.core.model import Model
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.environments import EpisodeError, from_openenv
from arthex.testing.contracts.environment import EnvironmentContract
from arthex.testing.serving import served_model
from arthex.testing.tiny_model import tiny_model

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

VOWELS = "aeiou"
CUES = ["Say a word with many vowels.", "Name a fruit.", "Spell a long word."]
STEPS = 2


def vowel_score(text: str) -> float:
    """The environment's scoring, written out again for the oracle."""
    return len(set(text.lower()) & set(VOWELS)) / len(VOWELS)


class ReplyAction(Action):
    text: str


class CueObservation(Observation):
    cue: str = ""


class VowelEnv(OpenEnvBase[ReplyAction, CueObservation, State]):
    """Two cues per episode; each reply scores the share of vowels it uses."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)
        self._seed = 0

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> CueObservation:
        self._seed = seed or 0
        self._state = State(episode_id=episode_id, step_count=0)
        return CueObservation(cue=CUES[self._seed % len(CUES)])

    def step(
        self, action: ReplyAction, timeout_s: float | None = None, **kwargs: Any
    ) -> CueObservation:
        self._state.step_count += 1
        done = self._state.step_count >= STEPS
        return CueObservation(
            cue=CUES[(self._seed + self._state.step_count) % len(CUES)],
            reward=vowel_score(action.text),
            done=done,
            metadata={
                "seed": self._seed,
                "reply": action.text,
                "history": [self._state.step_count],
            },
        )

    @property
    def state(self) -> State:
        return self._state


class BrokenEnv(VowelEnv):
    def step(
        self, action: ReplyAction, timeout_s: float | None = None, **kwargs: Any
    ) -> CueObservation:
        raise RuntimeError("the simulator crashed")


SCENARIOS = [{"seed": 0}, {"seed": 1}]
SAMPLING: dict[str, Any] = {"max_tokens": 6, "temperature": 1.0}


def in_process(env: type[VowelEnv] = VowelEnv) -> Environment[Any]:
    return from_openenv(
        env, scenarios=SCENARIOS, prompt=lambda observation: observation.cue,
        action=lambda text: ReplyAction(text=text), max_turns=4, **SAMPLING,
    )  # fmt: skip


def remote(base_url: str) -> Environment[Any]:
    return from_openenv(
        lambda: GenericEnvClient(base_url=base_url),
        scenarios={"train": SCENARIOS, "val": SCENARIOS[:1]},
        prompt=lambda observation: observation["cue"], action=lambda text: {"text": text},
        max_turns=4, **SAMPLING,
    )  # fmt: skip


@asynccontextmanager
async def env_server() -> AsyncIterator[str]:
    """OpenEnv's own server app for VowelEnv, on a loopback port, on this loop."""
    app = create_fastapi_app(VowelEnv, ReplyAction, CueObservation, max_concurrent_envs=8)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(200):
            if server.started:
                break
            await asyncio.sleep(0.05)
        assert server.started, "the OpenEnv server did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


def served(tiny: str, root: Path) -> AbstractAsyncContextManager[arthex.TrainableModel]:
    return served_model(tiny, root, name="player", project="openenv")


def check_episode(trajectory: Trajectory, seed: int, *, served: bool) -> None:
    calls = trajectory.exchanges.chat_completions
    assert len(calls) == STEPS
    replies = [call.response.choices[0].message.content or "" for call in calls]
    assert trajectory.reward == pytest.approx(sum(vowel_score(r) for r in replies))
    assert trajectory.metrics["steps"] == STEPS
    assert trajectory.metrics["done"] is True
    assert trajectory.metrics["final_reward"] == pytest.approx(vowel_score(replies[-1]))
    if served:  # OpenEnv's wire leaves the observation's metadata out
        assert "seed" not in trajectory.metadata
    else:
        assert trajectory.metadata["seed"] == seed
        assert trajectory.metadata["reply"] == replies[-1]
        assert trajectory.metadata["history"] == f"[{STEPS}]"
    # each turn's prompt is the cue the environment gave
    assert calls[0].request["messages"][-1]["content"] == CUES[seed % len(CUES)]
    assert calls[1].request["messages"][-1]["content"] == CUES[(seed + 1) % len(CUES)]
    sampled = [
        t for call in calls for t in (call.response.choices[0].model_extra or {})["token_ids"]
    ]
    assert [t for s in token_samples(trajectory, "episode") for t in s.sampled] == sampled


def test_an_in_process_and_a_served_openenv_environment_train_as_sampled(
    tiny: str, tmp_path: Path
) -> None:
    async def main() -> tuple[list[Trajectory], list[Trajectory], int]:
        async with served(tiny, tmp_path) as model, env_server() as url:
            local, server = in_process(), remote(url)
            here = [await local.rollout(model, s) for s in local.scenarios("train")]
            there = await asyncio.gather(
                *(server.rollout(model, s) for s in server.scenarios("train"))
            )
            result = await model.train([TrajectoryGroup(here), TrajectoryGroup(there)])
            return here, list(there), result.step

    here, there, step = asyncio.run(main())
    for trajectories, remote_ in ((here, False), (there, True)):
        for trajectory, scenario in zip(trajectories, SCENARIOS):
            check_episode(trajectory, scenario["seed"], served=remote_)
    assert step == 1


def test_a_crashing_environment_fails_the_rollout_with_its_error(tiny: str, tmp_path: Path) -> None:
    async def main() -> None:
        async with served(tiny, tmp_path) as model:
            environment = in_process(BrokenEnv)
            await environment.rollout(model, SCENARIOS[0])

    with pytest.raises(EpisodeError, match="the simulator crashed"):
        asyncio.run(main())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"env": VowelEnv(), "scenarios": SCENARIOS}, "factory"),
        ({"env": VowelEnv, "scenarios": "seed"}, "scenarios must be"),
        ({"env": VowelEnv, "scenarios": [3]}, "dict of reset arguments"),
        ({"env": VowelEnv, "scenarios": SCENARIOS, "max_turns": 0}, "max_turns"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(arthex.InvalidInputError, match=message) as caught:
        from_openenv(prompt=str, action=str, **kwargs)
    assert "\n" not in str(caught.value)


def test_the_splits_of_a_mapping(tmp_path: Path) -> None:
    environment = remote("http://127.0.0.1:9")
    assert environment.scenarios("val") == SCENARIOS[:1]
    with pytest.raises(arthex.InvalidInputError, match="no split 'test'"):
        environment.scenarios("test")


class _Served:
    tiny: str
    root: Path

    @pytest.fixture(autouse=True)
    def _where(self, tiny: str, tmp_path: Path) -> None:
        self.tiny, self.root = tiny, tmp_path

    def serve(self) -> AbstractAsyncContextManager[Model]:
        return served(self.tiny, self.root)


class TestInProcessContract(_Served, EnvironmentContract):
    def environment(self) -> Environment[Any]:
        return in_process()


class TestServedContract(_Served, EnvironmentContract):
    split = "val"

    def serve(self) -> AbstractAsyncContextManager[Model]:
        @asynccontextmanager
        async def both() -> AsyncIterator[Model]:
            async with env_server() as url, served(self.tiny, self.root) as model:
                self.url = url
                yield model

        return both()

    def environment(self) -> Environment[Any]:
        # the server starts inside serve(); the client factory reads its address per episode
        return from_openenv(
            lambda: GenericEnvClient(base_url=self.url), scenarios=SCENARIOS,
            prompt=lambda observation: observation["cue"], action=lambda text: {"text": text},
            **SAMPLING,
        )  # fmt: skip
