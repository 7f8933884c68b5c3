"""Serving: every step is served with logprobs and token ids, step names address their
weights, the endpoint answers while an update runs, and a rewarded completion gains
probability."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import pytest
from openai.types.chat.chat_completion import ChatCompletion, Choice

from ...core.identity import ModelSpec
from ...core.trajectories import Trajectory, TrajectoryGroup
from ...ports.training_backend import Capability, InferenceEndpoint, TrainingBackend
from .backend_base import BackendFixtures, require
from .scenario import (
    PROMPT,
    SERVE_WHILE_TRAINING_S,
    Greedy,
    Scenario,
    greedy,
    openai_client_for,
    rollout_groups,
    run_scenario,
)

T = TypeVar("T")


class ServingContract(BackendFixtures):
    """The `inference` capability, and the learning signal seen through it."""

    def _served(self, backend: TrainingBackend, spec: ModelSpec, scenario: Scenario[T]) -> T:
        """Run the scenario when the backend serves what it trains; skip the test, naming the
        capability, when it does not."""
        require(backend, Capability.INFERENCE)
        return run_scenario(backend, spec, scenario)

    # -- serving -------------------------------------------------------------------------

    def test_endpoint_serves_each_step_with_logprobs_and_token_ids(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        async def scenario(
            b: TrainingBackend, s: ModelSpec, endpoint: InferenceEndpoint | None
        ) -> tuple[set[str], Choice]:
            assert endpoint is not None, "a backend with 'inference' returns an endpoint"
            async with openai_client_for(endpoint) as client:
                names = {m.id async for m in client.models.list()}
                response = await client.chat.completions.create(
                    model=s.run.inference_name(0), messages=PROMPT, max_tokens=5, logprobs=True
                )
            return names, response.choices[0]

        names, choice = self._served(backend, spec, scenario)
        assert {spec.run.inference_name(), spec.run.inference_name(0)} <= names
        extra = choice.model_extra or {}
        assert extra.get("prompt_token_ids"), "choices carry the prompt's token ids"
        assert extra.get("token_ids"), "choices carry the completion's token ids"
        assert choice.logprobs is not None and choice.logprobs.content is not None
        assert len(choice.logprobs.content) == len(extra["token_ids"])

    def test_step_names_resolve_to_that_steps_weights(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        async def scenario(
            b: TrainingBackend, s: ModelSpec, endpoint: InferenceEndpoint | None
        ) -> tuple[Greedy, Greedy, Greedy, Greedy]:
            before, step2 = await self._train_two(b, s, endpoint)
            assert endpoint is not None
            return (
                before,
                await greedy(endpoint, s.run.inference_name(0)),
                step2,
                await greedy(endpoint, s.run.inference_name()),
            )

        before, step0, step2, latest = self._served(backend, spec, scenario)
        assert step0.tokens == before.tokens
        assert step0.logprob == pytest.approx(before.logprob, abs=1e-3)
        assert latest.tokens == step2.tokens
        assert latest.logprob == pytest.approx(step2.logprob, abs=1e-3)
        assert (step2.tokens, round(step2.logprob, 3)) != (step0.tokens, round(step0.logprob, 3))

    def test_the_endpoint_answers_while_a_train_call_is_open(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        """No stop-the-world: with a train call started and not finished (its first metrics
        received, the rest not yet asked for), requests for the step it trains from are
        answered, by that step's weights. A backend that locked serving while training
        would leave the request waiting for the call, which waits for this test."""

        async def scenario(
            b: TrainingBackend, s: ModelSpec, endpoint: InferenceEndpoint | None
        ) -> tuple[Greedy, Greedy, int]:
            assert endpoint is not None
            before = await greedy(endpoint, s.run.inference_name(0))
            groups = await rollout_groups(endpoint, s.run.inference_name(0))
            training = b.train_steps(
                s.run, groups, self.config(learning_rate=self.learning_signal_lr)
            )
            await anext(training)  # the call is open: more metrics or its end are still due
            during = await asyncio.wait_for(
                greedy(endpoint, s.run.inference_name(0)), SERVE_WHILE_TRAINING_S
            )
            async for _m in training:
                pass
            return before, during, await b.get_step(s.run)

        before, during, step = self._served(backend, spec, scenario)
        assert step == 1
        assert during.tokens == before.tokens
        assert during.logprob == pytest.approx(before.logprob, abs=1e-3)

    def test_rewarding_a_completion_raises_its_probability(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        """The learning signal: for a fixed prompt, reward one completion over another for a
        few steps; the rewarded one becomes more likely under the served model."""

        async def scenario(
            b: TrainingBackend, s: ModelSpec, endpoint: InferenceEndpoint | None
        ) -> tuple[Greedy, Greedy, list[int]]:
            assert endpoint is not None
            async with openai_client_for(endpoint) as client:

                async def reply(**sampling: Any) -> Choice:
                    response: ChatCompletion = await client.chat.completions.create(
                        model=s.run.inference_name(),
                        messages=PROMPT,
                        max_tokens=6,
                        logprobs=True,
                        **sampling,
                    )
                    return response.choices[0]

                good = await reply(temperature=0)
                bad = await reply(temperature=1.0, seed=7)
            before = await greedy(endpoint, s.run.inference_name(0))
            group = TrajectoryGroup(
                [
                    Trajectory(messages_and_choices=[*PROMPT, good], reward=1.0),
                    Trajectory(messages_and_choices=[*PROMPT, bad], reward=0.0),
                ]
            )
            for _ in range(4):
                async for _m in b.train_steps(
                    s.run, [group], self.config(learning_rate=self.learning_signal_lr)
                ):
                    pass
            after = await greedy(endpoint, s.run.inference_name())
            return before, after, list((bad.model_extra or {})["token_ids"])

        before, after, bad_tokens = self._served(backend, spec, scenario)
        assert before.tokens != bad_tokens, "the sampled completion should differ from greedy"
        assert after.tokens == before.tokens
        assert after.logprob > before.logprob + 1.0, (
            f"logprob of the rewarded completion went {before.logprob:.2f} -> {after.logprob:.2f}"
        )
