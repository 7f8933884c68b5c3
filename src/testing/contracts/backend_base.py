"""The fixtures and hooks every backend contract mixin shares.

    class TestMyBackend(TrainingBackendContract):
        @pytest.fixture
        def backend(self, tmp_path): return MyBackend(root=tmp_path)

Optional hooks: `base_model` (what `ModelSpec.base_model` is for this backend) and
`make_groups` (trainable groups for it; the default builds Choices with small token ids and
logprobs, which any tokenizer with 64+ tokens accepts). Tests that need a capability the
backend lacks check that it raises UnsupportedCapability instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ...core.config import TrainConfig
from ...core.identity import ModelSpec, RunRef
from ...core.trajectories import TrajectoryGroup
from ...ports.training_backend import Capability, InferenceEndpoint, TrainingBackend
from ..builders import synthetic_groups
from .scenario import Greedy, greedy, rollout_groups


class BackendFixtures:
    """Override `backend` (and optionally the other hooks); the contract mixins use these."""

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

    async def _train_two(
        self, b: TrainingBackend, s: ModelSpec, endpoint: InferenceEndpoint | None
    ) -> tuple[Greedy, Greedy]:
        """Two learning steps; step 0's greedy answer before them, step 2's after."""
        assert endpoint is not None, "a backend with 'inference' returns an endpoint"
        before = await greedy(endpoint, s.run.inference_name(0))
        for i in range(2):
            groups = await rollout_groups(endpoint, s.run.inference_name(), offset=i)
            async for _m in b.train_steps(
                s.run, groups, self.config(learning_rate=self.learning_signal_lr)
            ):
                pass
        return before, await greedy(endpoint, s.run.inference_name(2))

    def config(self, **overrides: Any) -> TrainConfig:
        return TrainConfig(**{"learning_rate": 1e-3, **overrides})


def require(backend: TrainingBackend, capability: Capability) -> None:
    """Skip the calling test, naming the capability, when the backend lacks it."""
    if capability not in backend.capabilities:
        pytest.skip(f"backend lacks capability '{capability.value}'")
