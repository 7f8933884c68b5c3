"""The step rules every training backend keeps: register at 0, one step per update, deletion
keeps exactly what it is told and never the latest, and bad input is refused."""

from __future__ import annotations

import pytest

from ...core.backend_train import checked_train_steps
from ...core.config import TrainConfig
from ...core.errors import ArthexError, InvalidInputError, UnsupportedCapability
from ...core.identity import ModelSpec, RunRef
from ...ports.training_backend import Capability, InferenceEndpoint, TrainingBackend
from .backend_base import BackendFixtures, require
from .scenario import (
    run_scenario,
)


class StepContract(BackendFixtures):
    """Steps, checkpoint deletion, bad input and capability refusals."""

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
            samples = [
                dict(m) async for m in b.train_steps(s.run, self.make_groups(), self.config())
            ]
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
            async for _m in b.train_steps(s.run, self.make_groups(equal=True), self.config()):
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
                async for _m in b.train_steps(s.run, self.make_groups(offset=i), self.config()):
                    pass
            before = await b.checkpoint_steps(s.run)
            deleted = await b.delete_checkpoint_files(s.run, {1, 3})
            return before, deleted, await b.checkpoint_steps(s.run)

        require(backend, Capability.DELETE_CHECKPOINTS)
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
                async for _m in b.train_steps(s.run, self.make_groups(offset=i), self.config()):
                    pass
            await b.delete_checkpoint_files(s.run, set())
            return await b.get_step(s.run), await b.checkpoint_steps(s.run)

        require(backend, Capability.DELETE_CHECKPOINTS)
        step, steps = run_scenario(backend, spec, scenario)
        assert step == 2
        assert steps == [2]

    # -- bad input and capabilities ------------------------------------------------------

    def test_empty_groups_raise(self, backend: TrainingBackend, spec: ModelSpec) -> None:
        async def scenario(b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None) -> int:
            with pytest.raises(InvalidInputError):
                async for _m in checked_train_steps(b, s.run, [], self.config()):
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
        self._trains_or_is_refused(backend, spec, f"loss:{loss}", self.config(loss_fn=loss))

    def test_kl_penalty_trains_or_is_refused(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        config = self.config(kl_penalty_coef=0.1, kl_penalty_reference_step=0)
        self._trains_or_is_refused(backend, spec, Capability.KL_PENALTY, config)

    def _trains_or_is_refused(
        self, backend: TrainingBackend, spec: ModelSpec, capability: str, config: TrainConfig
    ) -> None:
        """Declared: it trains (step 1). Not declared: the core refuses it, from what the
        backend declares, before anything trains (step 0)."""
        supported = capability in backend.capabilities

        async def scenario(b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None) -> int:
            if supported:
                async for _m in checked_train_steps(b, s.run, self.make_groups(), config):
                    pass
            else:  # the checks run when the call is made, before any step
                with pytest.raises(UnsupportedCapability):
                    checked_train_steps(b, s.run, self.make_groups(), config)
            return await b.get_step(s.run)

        assert run_scenario(backend, spec, scenario) == (1 if supported else 0)
