"""TrainingBackendContract: what every training backend does, ours and third parties' alike.

    class TestMyBackend(TrainingBackendContract):
        @pytest.fixture
        def backend(self, tmp_path): return MyBackend(root=tmp_path)

Optional hooks: `base_model` (what `ModelSpec.base_model` is for this backend) and
`make_groups` (trainable groups for it; the default builds Choices with small token ids and
logprobs, which any tokenizer with 64+ tokens accepts). Tests that need a capability the
backend lacks check that it raises UnsupportedCapability instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import attrs
import pytest
from openai import AsyncOpenAI
from openai.types.chat.chat_completion import Choice

from ...core.config import TrainConfig
from ...core.errors import ArthexError, InvalidInputError, UnsupportedCapability
from ...core.identity import ModelSpec, RunRef
from ...core.trajectories import Trajectory, TrajectoryGroup
from ...ports.training_backend import Capability, InferenceEndpoint, TrainingBackend
from .sft import SupervisedFineTuningContract

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


def sampled_choice(
    content: str, *, prompt_token_ids: list[int], token_ids: list[int], logprobs: list[float]
) -> Choice:
    """A Choice as an arthex inference server returns it: logprobs per token (`token_id:N`)
    and the prompt and completion token ids as extra fields."""
    return Choice.model_validate(
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": content},
            "logprobs": {
                "content": [
                    {"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                    for t, lp in zip(token_ids, logprobs, strict=True)
                ]
            },
            "prompt_token_ids": prompt_token_ids,
            "token_ids": token_ids,
        }
    )


def synthetic_groups(
    n_groups: int = 2, size: int = 4, *, equal: bool = False, offset: int = 0
) -> list[TrajectoryGroup]:
    """Groups whose Choices carry prompt/completion token ids in [10, 60) and logprobs."""
    groups = []
    for g in range(n_groups):
        trajectories = []
        for i in range(size):
            completion = [10 + (offset + g * 7 + i * 3 + k) % 50 for k in range(4)]
            choice = sampled_choice(
                f"answer {i}",
                prompt_token_ids=[1, 11 + g, 12, 13],
                token_ids=completion,
                logprobs=[-1.0 - 0.1 * k for k in range(len(completion))],
            )
            trajectories.append(
                Trajectory(
                    messages_and_choices=[{"role": "user", "content": f"question {g}"}, choice],
                    reward=1.0 if equal else float(i % 2),
                )
            )
        groups.append(TrajectoryGroup(trajectories))
    return groups


class TrainingBackendContract(SupervisedFineTuningContract):
    """Mix into a test class and override `backend`. The `sft` tests come with it (sft.py)."""

    @pytest.fixture
    def backend(self) -> TrainingBackend:
        raise NotImplementedError("override the `backend` fixture to return your backend")

    @pytest.fixture
    def base_model(self) -> str | None:
        return None

    @pytest.fixture
    def spec(self, tmp_path: Path, base_model: str | None) -> ModelSpec:
        return ModelSpec(
            run=RunRef("contract", "model-a"),
            base_model=base_model,
            base_path=str(tmp_path / "art"),
        )

    @pytest.fixture
    def restart_backend(self) -> TrainingBackend:
        """Override to return a NEW backend over the same storage as `backend`, to run the
        restart tests; by default they are skipped."""
        pytest.skip("override the `restart_backend` fixture to run the restart tests")

    learning_signal_lr = 1e-2

    def make_groups(self, *, equal: bool = False, offset: int = 0) -> list[TrajectoryGroup]:
        return synthetic_groups(equal=equal, offset=offset)

    def config(self, **overrides: Any) -> TrainConfig:
        return TrainConfig(**{"learning_rate": 1e-3, **overrides})

    # -- step rules ----------------------------------------------------------------------

    def test_step_is_zero_after_register(self, backend: TrainingBackend, spec: ModelSpec) -> None:
        async def scenario(b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None) -> int:
            return await b.get_step(s.run)

        assert run_scenario(backend, spec, scenario) == 0

    def test_train_advances_the_step_by_one_and_yields_metrics(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        async def scenario(
            b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None
        ) -> tuple[list[dict[str, float]], int, list[int]]:
            samples = [dict(m) async for m in b.train(s.run, self.make_groups(), self.config())]
            return samples, await b.get_step(s.run), await b.checkpoint_steps(s.run)

        samples, step, steps = run_scenario(backend, spec, scenario)
        assert step == 1
        assert 1 in steps
        assert samples, "train must yield one metrics dict per gradient step"
        for sample in samples:
            assert all(isinstance(v, float | int) for v in sample.values())

    def test_nothing_trainable_still_advances_the_step(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        async def scenario(b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None) -> int:
            async for _m in b.train(s.run, self.make_groups(equal=True), self.config()):
                pass
            return await b.get_step(s.run)

        assert run_scenario(backend, spec, scenario) == 1

    def test_delete_keeps_exactly_what_was_asked(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        async def scenario(
            b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None
        ) -> tuple[list[int], list[int], list[int]]:
            for i in range(3):
                async for _m in b.train(s.run, self.make_groups(offset=i), self.config()):
                    pass
            before = await b.checkpoint_steps(s.run)
            deleted = await b.delete_checkpoint_files(s.run, {1, 3})
            return before, deleted, await b.checkpoint_steps(s.run)

        if Capability.DELETE_CHECKPOINTS not in backend.capabilities:
            pytest.skip("backend lacks capability 'delete_checkpoints'")
        before, deleted, after = run_scenario(backend, spec, scenario)
        assert {1, 2, 3} <= set(before)
        assert after == [s for s in before if s in {1, 3}]
        assert sorted(deleted) == [s for s in before if s not in {1, 3}]

    def test_delete_never_removes_the_latest(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        async def scenario(
            b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None
        ) -> tuple[int, list[int]]:
            for i in range(2):
                async for _m in b.train(s.run, self.make_groups(offset=i), self.config()):
                    pass
            await b.delete_checkpoint_files(s.run, set())
            return await b.get_step(s.run), await b.checkpoint_steps(s.run)

        if Capability.DELETE_CHECKPOINTS not in backend.capabilities:
            pytest.skip("backend lacks capability 'delete_checkpoints'")
        step, steps = run_scenario(backend, spec, scenario)
        assert step == 2
        assert steps == [2]

    # -- bad input and capabilities ------------------------------------------------------

    def test_empty_groups_raise(self, backend: TrainingBackend, spec: ModelSpec) -> None:
        async def scenario(b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None) -> int:
            with pytest.raises(InvalidInputError):
                async for _m in b.train(s.run, [], self.config()):
                    pass
            return await b.get_step(s.run)

        assert run_scenario(backend, spec, scenario) == 0

    def test_unregistered_run_raises(self, backend: TrainingBackend, spec: ModelSpec) -> None:
        async def scenario(b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None) -> None:
            with pytest.raises(ArthexError):
                await b.get_step(RunRef(s.run.project, "never-registered"))

        run_scenario(backend, spec, scenario)

    @pytest.mark.parametrize("loss", ["cispo", "ppo", "importance_sampling"])
    def test_each_loss_trains_or_is_refused(
        self, backend: TrainingBackend, spec: ModelSpec, loss: str
    ) -> None:
        supported = f"loss:{loss}" in backend.capabilities

        async def scenario(b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None) -> int:
            config = self.config(loss_fn=loss)
            if supported:
                async for _m in b.train(s.run, self.make_groups(), config):
                    pass
            else:
                with pytest.raises(UnsupportedCapability):
                    async for _m in b.train(s.run, self.make_groups(), config):
                        pass
            return await b.get_step(s.run)

        assert run_scenario(backend, spec, scenario) == (1 if supported else 0)

    def test_kl_penalty_trains_or_is_refused(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        supported = Capability.KL_PENALTY in backend.capabilities

        async def scenario(b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None) -> int:
            config = self.config(kl_penalty_coef=0.1, kl_penalty_reference_step=0)
            if supported:
                async for _m in b.train(s.run, self.make_groups(), config):
                    pass
            else:
                with pytest.raises(UnsupportedCapability):
                    async for _m in b.train(s.run, self.make_groups(), config):
                        pass
            return await b.get_step(s.run)

        assert run_scenario(backend, spec, scenario) == (1 if supported else 0)

    def test_concurrent_train_calls_are_serialized(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        async def scenario(
            b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None
        ) -> tuple[int, list[int]]:
            async def one(offset: int) -> int:
                n = 0
                try:
                    async for _m in b.train(s.run, self.make_groups(offset=offset), self.config()):
                        n += 1
                except ArthexError:
                    return 0  # refused while another train runs: also allowed
                return 1

            results = await asyncio.gather(one(0), one(1))
            return sum(results), await b.checkpoint_steps(s.run)

        done, steps = run_scenario(backend, spec, scenario)
        assert done >= 1
        assert max(steps) == done, "each finished train call advances the step exactly once"

    def test_close_twice_is_harmless(self, backend: TrainingBackend, spec: ModelSpec) -> None:
        async def scenario(b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None) -> None:
            await b.close()

        run_scenario(backend, spec, scenario)

    # -- restart -------------------------------------------------------------------------

    def test_restart_resumes_from_the_newest_checkpoint(
        self, backend: TrainingBackend, restart_backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        if Capability.RESUME not in backend.capabilities:
            pytest.skip("backend lacks capability 'resume'")

        async def first(b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None) -> int:
            for i in range(2):
                async for _m in b.train(s.run, self.make_groups(offset=i), self.config()):
                    pass
            return await b.get_step(s.run)

        async def second(
            b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None
        ) -> tuple[int, int]:
            resumed = await b.get_step(s.run)
            async for _m in b.train(s.run, self.make_groups(offset=2), self.config()):
                pass
            return resumed, await b.get_step(s.run)

        assert run_scenario(backend, spec, first) == 2
        assert run_scenario(restart_backend, spec, second) == (2, 3)

    # -- serving -------------------------------------------------------------------------

    def test_endpoint_serves_each_step_with_logprobs_and_token_ids(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        if Capability.INFERENCE not in backend.capabilities:
            pytest.skip("backend lacks capability 'inference'")

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

        names, choice = run_scenario(backend, spec, scenario)
        assert {spec.run.inference_name(), spec.run.inference_name(0)} <= names
        extra = choice.model_extra or {}
        assert extra.get("prompt_token_ids"), "choices carry the prompt's token ids"
        assert extra.get("token_ids"), "choices carry the completion's token ids"
        assert choice.logprobs is not None and choice.logprobs.content is not None
        assert len(choice.logprobs.content) == len(extra["token_ids"])

    def test_step_names_resolve_to_that_steps_weights(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        if Capability.INFERENCE not in backend.capabilities:
            pytest.skip("backend lacks capability 'inference'")

        async def scenario(
            b: TrainingBackend, s: ModelSpec, endpoint: InferenceEndpoint | None
        ) -> tuple[Greedy, Greedy, Greedy, Greedy]:
            assert endpoint is not None
            before = await _greedy(endpoint, s.run.inference_name(0))
            for i in range(2):
                groups = await rollout_groups(endpoint, s.run.inference_name(), offset=i)
                async for _m in b.train(
                    s.run, groups, self.config(learning_rate=self.learning_signal_lr)
                ):
                    pass
            return (
                before,
                await _greedy(endpoint, s.run.inference_name(0)),
                await _greedy(endpoint, s.run.inference_name(2)),
                await _greedy(endpoint, s.run.inference_name()),
            )

        before, step0, step2, latest = run_scenario(backend, spec, scenario)
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
        if Capability.INFERENCE not in backend.capabilities:
            pytest.skip("backend lacks capability 'inference'")

        async def scenario(
            b: TrainingBackend, s: ModelSpec, endpoint: InferenceEndpoint | None
        ) -> tuple[Greedy, Greedy, int]:
            assert endpoint is not None
            before = await _greedy(endpoint, s.run.inference_name(0))
            groups = await rollout_groups(endpoint, s.run.inference_name(0))
            training = b.train(s.run, groups, self.config(learning_rate=self.learning_signal_lr))
            await anext(training)  # the call is open: more metrics or its end are still due
            during = await asyncio.wait_for(
                _greedy(endpoint, s.run.inference_name(0)), SERVE_WHILE_TRAINING_S
            )
            async for _m in training:
                pass
            return before, during, await b.get_step(s.run)

        before, during, step = run_scenario(backend, spec, scenario)
        assert step == 1
        assert during.tokens == before.tokens
        assert during.logprob == pytest.approx(before.logprob, abs=1e-3)

    def test_rewarding_a_completion_raises_its_probability(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        """The learning signal: for a fixed prompt, reward one completion over another for a
        few steps; the rewarded one becomes more likely under the served model."""
        if Capability.INFERENCE not in backend.capabilities:
            pytest.skip("backend lacks capability 'inference'")

        async def scenario(
            b: TrainingBackend, s: ModelSpec, endpoint: InferenceEndpoint | None
        ) -> tuple[Greedy, Greedy, list[int]]:
            assert endpoint is not None
            async with openai_client_for(endpoint) as client:
                good = (
                    await client.chat.completions.create(
                        model=s.run.inference_name(),
                        messages=PROMPT,
                        max_tokens=6,
                        temperature=0,
                        logprobs=True,
                    )
                ).choices[0]
                bad = (
                    await client.chat.completions.create(
                        model=s.run.inference_name(),
                        messages=PROMPT,
                        max_tokens=6,
                        temperature=1.0,
                        logprobs=True,
                        seed=7,
                    )
                ).choices[0]
            before = await _greedy(endpoint, s.run.inference_name(0))
            group = TrajectoryGroup(
                [
                    Trajectory(messages_and_choices=[*PROMPT, good], reward=1.0),
                    Trajectory(messages_and_choices=[*PROMPT, bad], reward=0.0),
                ]
            )
            for _ in range(4):
                async for _m in b.train(
                    s.run, [group], self.config(learning_rate=self.learning_signal_lr)
                ):
                    pass
            after = await _greedy(endpoint, s.run.inference_name())
            return before, after, list((bad.model_extra or {})["token_ids"])

        before, after, bad_tokens = run_scenario(backend, spec, scenario)
        assert before.tokens != bad_tokens, "the sampled completion should differ from greedy"
        assert after.tokens == before.tokens
        assert after.logprob > before.logprob + 1.0, (
            f"logprob of the rewarded completion went {before.logprob:.2f} -> {after.logprob:.2f}"
        )


PROMPT: list[Any] = [{"role": "user", "content": "What is two plus two?"}]


@attrs.frozen
class Greedy:
    tokens: list[int]
    logprob: float


SERVE_WHILE_TRAINING_S = 120.0


def openai_client_for(endpoint: InferenceEndpoint) -> AsyncOpenAI:
    """A client for a backend's endpoint that fails fast instead of retrying."""
    return AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)


async def _greedy(endpoint: InferenceEndpoint, model: str) -> Greedy:
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
