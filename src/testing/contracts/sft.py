"""SupervisedFineTuningContract: the `sft` capability, part of every TrainingBackendContract.

A backend that lists `sft` fine-tunes as one step of its run: the step advances by one, the
metrics follow ART's names and the config's learning rates, the loss falls on data a model can
memorise, and (with `inference`) the served model then answers the training prompts with the
training replies, greedily. A backend without `sft` must refuse it with UnsupportedCapability.

Hooks (class attributes): `sft_learning_rate` and `sft_epochs` (enough for the backend's model
to memorise `sft_data()`), and `sft_data()` itself.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from openai import AsyncOpenAI

from ...core.config import TrainConfig
from ...core.conversations import Conversation, conversation_from
from ...core.errors import InvalidInputError, UnsupportedCapability
from ...core.identity import ModelSpec
from ...core.sft import TrainSFTConfig
from ...core.trajectories import TrajectoryGroup
from ...ports.training_backend import (
    Capability,
    InferenceEndpoint,
    SupervisedFineTuning,
    TrainingBackend,
    supervised,
)
from .backend_base import require
from .scenario import Scenario, run_scenario

SFT_DATA: tuple[tuple[str, str], ...] = (
    ("What is two plus two?", "four"),
    ("Count to three.", "one two three"),
    ("Say yes.", "yes"),
)
ART_SFT_KEYS = (
    "loss/train",
    "loss/grad_norm",
    "loss/learning_rate",
    "data/step_num_trajectories",
    "data/step_trainable_assistant_tokens",
    "data/step_num_dropped_trajectories",
    "data/step_num_gradient_steps",
)


class SupervisedFineTuningContract:
    """Needs the `backend`, `restart_backend` and `spec` fixtures and the `make_groups` and
    `config` hooks of TrainingBackendContract, which mixes this class in."""

    sft_learning_rate = 1e-2
    sft_epochs = 30

    def make_groups(self, *, equal: bool = False, offset: int = 0) -> list[TrajectoryGroup]:
        raise NotImplementedError("TrainingBackendContract provides make_groups")

    def config(self, **overrides: Any) -> TrainConfig:
        raise NotImplementedError("TrainingBackendContract provides config")

    def sft_data(self) -> list[Conversation]:
        return [
            conversation_from(
                [{"role": "user", "content": prompt}, {"role": "assistant", "content": reply}]
            )
            for prompt, reply in SFT_DATA
        ]

    def sft_config(self, **overrides: Any) -> TrainSFTConfig:
        values: dict[str, Any] = {
            "learning_rate": self.sft_learning_rate,
            "epochs": self.sft_epochs,
            "batch_size": len(self.sft_data()),
        }
        return TrainSFTConfig(**{**values, **overrides})

    def _fine_tuned(
        self, backend: TrainingBackend, spec: ModelSpec, scenario: Scenario[Any]
    ) -> Any:
        """Run the scenario when the backend offers `sft`; otherwise check that it refuses."""
        if Capability.SFT in backend.capabilities:
            assert isinstance(backend, SupervisedFineTuning), (
                "a backend listing 'sft' implements SupervisedFineTuning.train_sft"
            )
            return run_scenario(backend, spec, scenario)

        async def refused(b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None) -> int:
            with pytest.raises(UnsupportedCapability):
                supervised(b)
            if isinstance(b, SupervisedFineTuning):
                with pytest.raises(UnsupportedCapability):
                    async for _m in b.train_sft(s.run, self.sft_data(), self.sft_config()):
                        pass
            return await b.get_step(s.run)

        assert run_scenario(backend, spec, refused) == 0
        pytest.skip("backend lacks capability 'sft' (and refuses it, as it must)")

    def test_sft_advances_the_step_by_one_with_arts_metrics(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        async def scenario(
            b: Any, s: ModelSpec, _: InferenceEndpoint | None
        ) -> tuple[list[dict[str, float]], int, list[int]]:
            config = self.sft_config(epochs=2, batch_size=2)
            samples = [dict(m) async for m in b.train_sft(s.run, self.sft_data(), config)]
            return samples, await b.get_step(s.run), await b.checkpoint_steps(s.run)

        samples, step, steps = self._fine_tuned(backend, spec, scenario)
        assert step == 1
        assert 1 in steps
        assert len(samples) == 4, "3 conversations, batch_size 2, 2 epochs: 4 gradient steps"
        for sample in samples:
            assert set(ART_SFT_KEYS) <= set(sample)
            assert sample["data/step_num_gradient_steps"] == 4
            assert sample["data/step_num_trajectories"] == 3
            assert math.isfinite(sample["loss/train"]) and sample["loss/train"] > 0

    def test_sft_uses_each_batchs_learning_rate(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        rates = [3e-3, 2e-3, 1e-3]

        async def scenario(b: Any, s: ModelSpec, _: InferenceEndpoint | None) -> list[float]:
            config = TrainSFTConfig(learning_rate=rates, batch_size=1)
            return [
                m["loss/learning_rate"] async for m in b.train_sft(s.run, self.sft_data(), config)
            ]

        assert self._fine_tuned(backend, spec, scenario) == pytest.approx(rates)

    def test_sft_loss_falls_on_a_memorisable_dataset(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        async def scenario(b: Any, s: ModelSpec, _: InferenceEndpoint | None) -> list[float]:
            config = self.sft_config()
            return [m["loss/train"] async for m in b.train_sft(s.run, self.sft_data(), config)]

        losses = self._fine_tuned(backend, spec, scenario)
        first, last = losses[0], sum(losses[-3:]) / 3
        assert last < 0.8 * first, (
            f"SFT loss went {first:.3f} -> {last:.3f} over {len(losses)} steps"
        )

    def test_sft_served_model_reproduces_the_data_greedily(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        require(backend, Capability.INFERENCE)

        async def scenario(
            b: Any, s: ModelSpec, endpoint: InferenceEndpoint | None
        ) -> tuple[list[str], list[str]]:
            assert endpoint is not None
            async for _m in b.train_sft(s.run, self.sft_data(), self.sft_config()):
                pass
            replies = []
            async with AsyncOpenAI(
                base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0
            ) as client:
                for conversation in self.sft_data():
                    response = await client.chat.completions.create(
                        model=s.run.inference_name(1),
                        messages=list(conversation.messages[:-1]),  # type: ignore[arg-type]
                        max_tokens=16,
                        temperature=0,
                    )
                    replies.append(response.choices[0].message.content or "")
            return replies, [str(c.messages[-1]["content"]) for c in self.sft_data()]

        replies, expected = self._fine_tuned(backend, spec, scenario)
        assert replies == expected

    def test_sft_then_rl_continue_one_run(self, backend: TrainingBackend, spec: ModelSpec) -> None:
        make_groups, rl_config = self.make_groups, self.config()

        async def scenario(b: Any, s: ModelSpec, _: InferenceEndpoint | None) -> list[int]:
            steps = []
            async for _m in b.train_sft(s.run, self.sft_data(), self.sft_config(epochs=1)):
                pass
            steps.append(await b.get_step(s.run))
            async for _m in b.train_steps(s.run, make_groups(), rl_config):
                pass
            steps.append(await b.get_step(s.run))
            async for _m in b.train_sft(s.run, self.sft_data(), self.sft_config(epochs=1)):
                pass
            steps.append(await b.get_step(s.run))
            return steps

        assert self._fine_tuned(backend, spec, scenario) == [1, 2, 3]

    def test_sft_refuses_bad_input_before_any_change(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        async def scenario(b: Any, s: ModelSpec, _: InferenceEndpoint | None) -> int:
            with pytest.raises(InvalidInputError):
                async for _m in b.train_sft(s.run, [], self.sft_config()):
                    pass
            wrong_rates = TrainSFTConfig(learning_rate=[1e-3, 1e-3], batch_size=1)
            with pytest.raises(InvalidInputError, match="one rate per batch"):
                async for _m in b.train_sft(s.run, self.sft_data(), wrong_rates):
                    pass
            return int(await b.get_step(s.run))

        assert self._fine_tuned(backend, spec, scenario) == 0

    def test_restart_after_sft_resumes_its_step(
        self, backend: TrainingBackend, restart_backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        require(backend, Capability.RESUME)

        async def first(b: Any, s: ModelSpec, _: InferenceEndpoint | None) -> int:
            async for _m in b.train_sft(s.run, self.sft_data(), self.sft_config(epochs=1)):
                pass
            return int(await b.get_step(s.run))

        async def second(b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None) -> int:
            return await b.get_step(s.run)

        assert self._fine_tuned(backend, spec, first) == 1
        assert run_scenario(restart_backend, spec, second) == 1
