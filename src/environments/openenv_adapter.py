"""An OpenEnv environment (openenv-core 0.3, imported as `openenv`) as an arthex `Environment`.

An OpenEnv environment is a Gym-style server: `reset(**kwargs)` gives an observation,
`step(action)` the next one with a reward and a `done` flag; the environment's own rubric (if
it has one) sets the reward inside `step`. It does not say how a language model turns an
observation into an action, so `from_openenv` takes the two small functions that do, and plays
the episode as a chat: each observation becomes a user turn (`prompt`), each reply of the
model an action (`action`), until the environment is done or `max_turns` replies were given.

The model's calls are made in the rollout's own capture scope, so the trajectory holds the
endpoint's responses with the exact sampled token ids, as any captured trajectory does. The
reward is the sum of the step rewards (the episode's return); the metrics are `steps`,
`done` and `final_reward` (the last step's); the last observation's `metadata` goes to the
trajectory's metadata (values that are not plain scalars as JSON text).

`env` is a factory called once per rollout (episodes run concurrently, each on its own
instance): an OpenEnv `Environment` subclass (played in-process, through `reset_async` and
`step_async`) or an `EnvClient` (e.g. `GenericEnvClient(base_url=...)` for a server started
with `create_fastapi_app`; closed after the episode).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ..composition.capture import capture
from ..core.errors import InvalidInputError, MissingExtraError
from ..core.model import Model
from ..core.trajectories import Trajectory
from .shared import EpisodeError, metadata_value

EXTRA = "envs"

Prompt = Callable[[Any], "str | Sequence[Mapping[str, Any]]"]
"""observation -> the next user message (text), or chat messages to append."""
Action = Callable[[str], Any]
"""the model's reply text -> the environment's action (an `Action`, or a dict for a
`GenericEnvClient`)."""
Scenarios = Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Mapping[str, Any]]]


def _openenv() -> tuple[type, type]:
    """OpenEnv's `EnvClient` and `Environment` classes."""
    try:
        from openenv.core.env_client import EnvClient
        from openenv.core.env_server.interfaces import Environment
    except ImportError as error:
        raise MissingExtraError("openenv-core", EXTRA) from error
    return EnvClient, Environment


def from_openenv(
    env: Callable[[], Any],
    *,
    scenarios: Scenarios,
    prompt: Prompt,
    action: Action,
    system_prompt: str | None = None,
    max_turns: int = 8,
    **sampling: Any,
) -> OpenEnvEnvironment:
    """An arthex `Environment` playing an OpenEnv environment with the model.

    `scenarios`: the `reset` keyword arguments of each episode (`{"seed": 3}`, ...), one
    list for every split, or a mapping from split name to its list. `sampling` goes to each
    chat-completions call (`temperature=`, `max_tokens=`, ...); `logprobs=True` unless given.
    """
    kinds = _openenv()
    if not callable(env) or isinstance(env, kinds):
        raise InvalidInputError(
            "from_openenv: env must be a factory called once per episode (an Environment "
            "class, or a function returning an Environment or an EnvClient), got "
            f"{type(env).__module__}.{type(env).__qualname__}"
        )
    for name, value in (("prompt", prompt), ("action", action)):
        if not callable(value):
            raise InvalidInputError(f"from_openenv: {name} must be a function, got {value!r}")
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise InvalidInputError(
            f"from_openenv: max_turns must be an integer >= 1, got {max_turns!r}"
        )
    given: object = scenarios
    if isinstance(given, Mapping):
        splits = {str(split): list(items) for split, items in given.items()}
    elif isinstance(given, Sequence) and not isinstance(given, str):
        splits = {"": list(given)}
    else:
        raise InvalidInputError(
            "from_openenv: scenarios must be a list of reset arguments (dicts) or a mapping "
            f"from split name to one, got {type(scenarios).__name__}"
        )
    for split, items in splits.items():
        for item in items:
            if not isinstance(item, Mapping):
                raise InvalidInputError(
                    f"from_openenv: each scenario is a dict of reset arguments, got {item!r}"
                    + (f" in split {split!r}" if split else "")
                )
    return OpenEnvEnvironment(
        env, splits, prompt, action, system_prompt, max_turns, {"logprobs": True, **sampling}
    )


class OpenEnvEnvironment:
    """An OpenEnv environment in arthex's terms (see `from_openenv`). Scenarios are the
    `reset` keyword arguments."""

    def __init__(
        self,
        factory: Callable[[], Any],
        splits: dict[str, list[Mapping[str, Any]]],
        prompt: Prompt,
        action: Action,
        system_prompt: str | None,
        max_turns: int,
        sampling: dict[str, Any],
    ) -> None:
        self.factory = factory
        self.splits = splits
        self.prompt = prompt
        self.action = action
        self.system_prompt = system_prompt
        self.max_turns = max_turns
        self.sampling = sampling

    def __repr__(self) -> str:
        return f"from_openenv({getattr(self.factory, '__qualname__', self.factory)!r})"

    def scenarios(self, split: str) -> Sequence[Mapping[str, Any]]:
        if not isinstance(split, str) or not split:
            raise InvalidInputError(f"split must be a non-empty string, got {split!r}")
        if "" in self.splits:
            return list(self.splits[""])
        if split not in self.splits:
            raise InvalidInputError(
                f"this OpenEnv environment has no split {split!r}; it has {sorted(self.splits)}"
            )
        return list(self.splits[split])

    async def rollout(self, model: Model, scenario: Mapping[str, Any]) -> Trajectory:
        """One episode against `model`'s endpoint; a failing environment raises
        `EpisodeError`."""
        if not isinstance(scenario, Mapping):
            raise InvalidInputError(
                f"an OpenEnv scenario is a dict of reset arguments, got {scenario!r}"
            )
        base_url, key = model.inference_base_url, model.inference_api_key
        if base_url is None or key is None:
            raise InvalidInputError(
                f"model {model.name!r} has no inference endpoint: register it with a backend "
                "or pass inference_base_url= and inference_api_key="
            )
        from openai import AsyncOpenAI

        player = _Player(self.factory(), _openenv())
        client = AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)
        rewards: list[float] = []
        done = False
        try:
            async with capture(endpoints=[base_url]) as trajectory:
                observation = await player.reset(dict(scenario))
                messages: list[Any] = []
                if self.system_prompt:
                    messages.append({"role": "system", "content": self.system_prompt})
                while True:
                    messages += _as_messages(self.prompt(observation.observation))
                    reply = await client.chat.completions.create(
                        model=model.get_inference_name(), messages=messages, **self.sampling
                    )
                    text = reply.choices[0].message.content or ""
                    messages.append({"role": "assistant", "content": text})
                    observation = await player.step(self.action(text))
                    rewards.append(float(observation.reward or 0.0))
                    done = observation.done
                    if done or len(rewards) >= self.max_turns:
                        break
        except InvalidInputError:
            raise
        except Exception as error:
            raise EpisodeError(
                f"the OpenEnv episode {dict(scenario)!r} failed: {type(error).__name__}: {error}"
            ) from error
        finally:
            await client.close()
            await player.close()
        trajectory.reward = sum(rewards)
        trajectory.metrics.update(steps=len(rewards), done=done, final_reward=rewards[-1])
        for name, value in _observation_metadata(observation.observation).items():
            trajectory.metadata[str(name)] = metadata_value(value)
        return trajectory


class _Step:
    def __init__(self, observation: Any, reward: float | None, done: bool) -> None:
        self.observation = observation
        self.reward = reward
        self.done = bool(done)


class _Player:
    """One episode's environment, in-process or behind a client, with one interface."""

    def __init__(self, instance: Any, kinds: tuple[type, type]) -> None:
        self.instance = instance
        client, environment = kinds
        if isinstance(instance, client):
            self.remote = True
        elif isinstance(instance, environment):
            self.remote = False
        else:
            kind = type(instance)
            raise InvalidInputError(
                "from_openenv: the factory must return an OpenEnv Environment or EnvClient, "
                f"got {kind.__module__}.{kind.__qualname__}"
            )

    async def reset(self, arguments: dict[str, Any]) -> _Step:
        if self.remote:
            return _from_result(await self.instance.reset(**arguments))
        return _from_observation(await self.instance.reset_async(**arguments))

    async def step(self, action: Any) -> _Step:
        if self.remote:
            return _from_result(await self.instance.step(action))
        return _from_observation(await self.instance.step_async(action))

    async def close(self) -> None:
        closing = self.instance.close()
        if isinstance(closing, Awaitable):
            await closing


def _from_result(result: Any) -> _Step:
    return _Step(result.observation, result.reward, result.done)


def _from_observation(observation: Any) -> _Step:
    return _Step(observation, observation.reward, observation.done)


def _observation_metadata(observation: Any) -> Mapping[str, Any]:
    metadata = (
        observation.get("metadata")
        if isinstance(observation, Mapping)
        else getattr(observation, "metadata", None)
    )
    return metadata if isinstance(metadata, Mapping) else {}


def _as_messages(turn: Any) -> list[Any]:
    if isinstance(turn, str):
        return [{"role": "user", "content": turn}]
    if isinstance(turn, Sequence) and all(isinstance(m, Mapping) for m in turn):
        return [dict(m) for m in turn]
    raise InvalidInputError(
        f"from_openenv: prompt must return a string or a list of chat messages, got {turn!r}"
    )
