"""Running a contract's scenario against a backend, and what scenarios share: an OpenAI
client for a backend's endpoint, greedy samples, rollouts through it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs
from openai import AsyncOpenAI

from ...core.identity import ModelSpec
from ...core.trajectories import Trajectory, TrajectoryGroup
from ...ports.training_backend import InferenceEndpoint, TrainingBackend

T = TypeVar("T")

Scenario = Callable[[TrainingBackend, ModelSpec, InferenceEndpoint | None], Awaitable[T]]


def run_scenario(backend: TrainingBackend, spec: ModelSpec, scenario: Scenario[T]) -> T:
    """Register, run the scenario, and always close the backend, in one event loop."""

    async def main() -> T:
        try:
            endpoint = await backend.register(spec)
            return await scenario(backend, spec, endpoint)
        finally:
            await backend.close()

    return asyncio.run(main())


PROMPT: list[Any] = [{"role": "user", "content": "What is two plus two?"}]


@attrs.frozen
class Greedy:
    tokens: list[int]
    logprob: float


SERVE_WHILE_TRAINING_S = 120.0


def openai_client_for(endpoint: InferenceEndpoint) -> AsyncOpenAI:
    """A client for a backend's endpoint that fails fast instead of retrying."""
    return AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)


async def greedy(endpoint: InferenceEndpoint, model: str) -> Greedy:
    async with openai_client_for(endpoint) as client:
        response = await client.chat.completions.create(
            model=model, messages=PROMPT, max_tokens=6, temperature=0, logprobs=True
        )
    choice = response.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    return Greedy(
        list((choice.model_extra or {})["token_ids"]),
        sum(t.logprob for t in choice.logprobs.content),
    )


async def rollout_groups(
    endpoint: InferenceEndpoint, model: str, *, offset: int = 0, groups: int = 2, n: int = 4
) -> list[TrajectoryGroup]:
    """Real rollouts through the endpoint, rewarded by index so every group is trainable."""
    out = []
    async with openai_client_for(endpoint) as client:
        for g in range(groups):
            messages: list[Any] = [{"role": "user", "content": f"Count to {g + 3 + offset}."}]
            response = await client.chat.completions.create(
                model=model,
                messages=messages,
                n=n,
                max_tokens=6,
                logprobs=True,
                seed=offset * 10 + g,
            )
            out.append(
                TrajectoryGroup(
                    [
                        Trajectory(messages_and_choices=[*messages, c], reward=float(i % 2))
                        for i, c in enumerate(response.choices)
                    ]
                )
            )
    return out
