"""A training backend's life: concurrent updates are serialized, close is idempotent, and a
new backend over the same storage resumes from the newest checkpoint."""

from __future__ import annotations

import asyncio
import shutil

import openai
import pytest

from ...adapters.layout import RunLayout
from ...core.errors import ArthexError, NotRegisteredError
from ...core.identity import ModelSpec
from ...ports.training_backend import (
    Capability,
    InferenceEndpoint,
    RunForgetting,
    TrainingBackend,
)
from .backend_base import BackendFixtures, require
from .scenario import (
    Greedy,
    greedy,
    run_scenario,
)


class LifecycleContract(BackendFixtures):
    """Concurrency, close and restart."""

    # -- concurrency and close ---------------------------------------------------------

    def test_concurrent_train_calls_are_serialized(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        async def scenario(
            b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None
        ) -> tuple[int, list[int]]:
            async def one(offset: int) -> int:
                n = 0
                try:
                    async for _m in b.train_steps(
                        s.run, self.make_groups(offset=offset), self.config()
                    ):
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

    def test_a_forgotten_run_whose_files_are_gone_registers_again_at_step_zero(
        self, backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        """What a server that deletes a model does (RunForgetting, then the run's folder
        removed): the same run registered again is a fresh one, the base weights at step 0,
        not the weights the backend still held."""
        if not isinstance(backend, RunForgetting):
            pytest.skip("backend keeps no run open in memory (no forget_run)")

        async def scenario(
            b: TrainingBackend, s: ModelSpec, endpoint: InferenceEndpoint | None
        ) -> tuple[Greedy | None, Greedy | None, int, list[int]]:
            base = trained = None
            if endpoint is not None:
                base, trained = await self._train_two(b, s, endpoint)
            else:
                async for _m in b.train_steps(s.run, self.make_groups(), self.config()):
                    pass
            assert isinstance(b, RunForgetting)
            await b.forget_run(s.run)
            with pytest.raises(NotRegisteredError):
                await b.checkpoint_steps(s.run)
            if endpoint is not None:  # nothing of the run is served any more
                with pytest.raises(openai.NotFoundError):
                    await greedy(endpoint, s.run.inference_name())
            await asyncio.to_thread(shutil.rmtree, RunLayout.of(s.base_path, s.run).dir, True)
            await b.forget_run(s.run)  # twice, or a run not open: nothing happens
            again = await b.register(s)
            fresh = await greedy(again, s.run.inference_name()) if again is not None else None
            if base is not None and trained is not None:
                moved = (trained.tokens, round(trained.logprob, 3))
                assert moved != (base.tokens, round(base.logprob, 3)), "the oracle can tell"
            return base, fresh, await b.get_step(s.run), await b.checkpoint_steps(s.run)

        base, fresh, step, steps = run_scenario(backend, spec, scenario)
        assert (step, steps) == (0, [0])
        if base is not None and fresh is not None:
            assert fresh.tokens == base.tokens
            assert fresh.logprob == pytest.approx(base.logprob, abs=1e-3)

    # -- restart -------------------------------------------------------------------------

    def test_restart_resumes_from_the_newest_checkpoint(
        self, backend: TrainingBackend, restart_backend: TrainingBackend, spec: ModelSpec
    ) -> None:
        require(backend, Capability.RESUME)

        async def first(b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None) -> int:
            for i in range(2):
                async for _m in b.train_steps(s.run, self.make_groups(offset=i), self.config()):
                    pass
            return await b.get_step(s.run)

        async def second(
            b: TrainingBackend, s: ModelSpec, _: InferenceEndpoint | None
        ) -> tuple[int, int]:
            resumed = await b.get_step(s.run)
            async for _m in b.train_steps(s.run, self.make_groups(offset=2), self.config()):
                pass
            return resumed, await b.get_step(s.run)

        assert run_scenario(backend, spec, first) == 2
        assert run_scenario(restart_backend, spec, second) == (2, 3)
