"""A training backend's life: concurrent updates are serialized, close is idempotent, and a
new backend over the same storage resumes from the newest checkpoint."""

from __future__ import annotations

import asyncio

from ...core.errors import ArthexError
from ...core.identity import ModelSpec
from ...ports.training_backend import Capability, InferenceEndpoint, TrainingBackend
from .backend_base import BackendFixtures, require
from .scenario import (
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
