"""Serving a named checkpoint (the `serve_checkpoint` capability): any kept step answers as
`{name}@{step}` with that step's weights, `{name}` stays on the latest step, a step without a
checkpoint is refused, and a backend that never registered the run serves its checkpoints
(what an evaluator beside a training process does)."""

from __future__ import annotations

import asyncio

import pytest

from ...core.errors import InvalidInputError, UnsupportedCapability
from ...core.identity import ModelSpec
from ...ports.training_backend import (
    Capability,
    InferenceEndpoint,
    TrainingBackend,
    checkpoint_server,
)
from .backend_base import BackendFixtures, require
from .scenario import Greedy, greedy, run_scenario


class CheckpointServingContract(BackendFixtures):
    """`CheckpointServing`, or a refusal naming the capability."""

    def test_a_named_step_is_served_with_its_weights_and_the_latest_name_stays(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        if Capability.SERVE_CHECKPOINT not in backend.capabilities:
            with pytest.raises(UnsupportedCapability, match="serve_checkpoint"):
                checkpoint_server(backend)
            return
        require(backend, Capability.INFERENCE)

        async def scenario(
            b: TrainingBackend, s: ModelSpec, endpoint: InferenceEndpoint | None
        ) -> tuple[Greedy, Greedy, Greedy, Greedy, tuple[int, str], int, str]:
            before, step2 = await self._train_two(b, s, endpoint)
            server = checkpoint_server(b)
            async with server.serve_checkpoint(s, 0) as served:
                at0 = await greedy(served.endpoint, served.model_name)
                latest = await greedy(served.endpoint, s.run.inference_name())
                named = (served.step, served.model_name)
            async with server.serve_checkpoint(s, None) as newest:
                newest_step = newest.step
            with pytest.raises(InvalidInputError) as refused:
                async with server.serve_checkpoint(s, 99):
                    pass
            return before, step2, at0, latest, named, newest_step, str(refused.value)

        before, step2, at0, latest, named, newest_step, refusal = run_scenario(
            backend, spec, scenario
        )
        assert named == (0, spec.run.inference_name(0))
        assert at0.tokens == before.tokens
        assert at0.logprob == pytest.approx(before.logprob, abs=1e-3)
        assert latest.tokens == step2.tokens, "serving step 0 must not move the latest name"
        assert latest.logprob == pytest.approx(step2.logprob, abs=1e-3)
        assert (step2.tokens, round(step2.logprob, 3)) != (at0.tokens, round(at0.logprob, 3))
        assert newest_step == 2
        assert "99" in refusal and "0, 1, 2" in refusal, refusal

    def test_a_backend_that_never_registered_the_run_serves_its_checkpoints(
        self, backend: TrainingBackend, restart_backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        """A second backend over the same storage, the run never registered on it (no trainer,
        no lease), serves step 0 and the latest step with their own weights."""
        require(restart_backend, Capability.SERVE_CHECKPOINT)
        before, step2 = run_scenario(backend, spec, self._train_two)

        async def read_only() -> tuple[Greedy, Greedy, int]:
            server = checkpoint_server(restart_backend)
            try:
                async with server.serve_checkpoint(spec, 0) as old:
                    at0 = await greedy(old.endpoint, old.model_name)
                async with server.serve_checkpoint(spec, None) as newest:
                    at_latest = await greedy(newest.endpoint, newest.model_name)
                    return at0, at_latest, newest.step
            finally:
                await restart_backend.close()

        at0, at_latest, newest_step = asyncio.run(read_only())
        assert newest_step == 2
        assert at0.tokens == before.tokens
        assert at0.logprob == pytest.approx(before.logprob, abs=1e-3)
        assert at_latest.tokens == step2.tokens
        assert at_latest.logprob == pytest.approx(step2.logprob, abs=1e-3)
