"""TinkerBackend passes the TrainingBackend contract with the real, pinned tinker SDK against
the local tinker emulator, which trains the tiny model with torch on CPU.

One emulator serves the whole module; each test gets a fresh backend (and so a fresh Tinker
session and training run), as separate users of one service would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from arthex.core.errors import BackendError, InvalidInputError
from arthex.core.identity import ModelSpec, RunRef
from arthex.ports.training_backend import TrainingBackend
from arthex.testing.contracts.training_backend import TrainingBackendContract

pytest.importorskip("tinker")
pytest.importorskip("torch")

from arthex.adapters.tinker import TinkerBackend
from arthex.emulators.tinker import TinkerEmulator
from tests._tinker import running_emulator

pytestmark = pytest.mark.e2e

TIMEOUT_S = 120.0
KEY = "tml-contract"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


@pytest.fixture(scope="module")
def emulator(tiny: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinkerEmulator]:
    yield from running_emulator(tiny, KEY, tmp_path_factory)


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINKER_TELEMETRY", "0")


class TestTinkerBackend(TrainingBackendContract):
    # the emulator's LoRA (alpha 32, on the head too) is unstable above 1e-2 on the tiny model
    sft_learning_rate = 5e-3
    sft_epochs = 60

    @pytest.fixture
    def base_model(self, tiny: str) -> str | None:
        return tiny

    @pytest.fixture
    def backend(self, emulator: TinkerEmulator) -> TrainingBackend:
        return TinkerBackend(base_url=emulator.base_url, api_key=KEY, timeout_s=TIMEOUT_S)

    @pytest.fixture
    def restart_backend(self, emulator: TinkerEmulator) -> TrainingBackend:
        """A new backend (a new process, as far as the service can tell) on the same model
        directory: the contract's `spec` keeps it."""
        return TinkerBackend(base_url=emulator.base_url, api_key=KEY, timeout_s=TIMEOUT_S)


class TestTinkerErrors:
    """Service-side refusals reach the caller as arthex errors that say what was refused."""

    def test_a_model_the_service_lacks_is_invalid_input(
        self, emulator: TinkerEmulator, tmp_path: Path
    ) -> None:
        spec = ModelSpec(RunRef("errors", "m"), base_model="no-such-model", base_path=str(tmp_path))
        backend = TinkerBackend(base_url=emulator.base_url, api_key=KEY, timeout_s=TIMEOUT_S)
        with pytest.raises(InvalidInputError, match="no-such-model"):
            asyncio.run(_register_and_close(backend, spec))
        assert not (tmp_path / "errors" / "models" / "m" / "tinker-run.json").exists()

    def test_a_wrong_api_key_is_a_backend_error(
        self, emulator: TinkerEmulator, tiny: str, tmp_path: Path
    ) -> None:
        spec = ModelSpec(RunRef("errors", "m"), base_model=tiny, base_path=str(tmp_path))
        backend = TinkerBackend(
            base_url=emulator.base_url, api_key="tml-wrong", timeout_s=TIMEOUT_S
        )
        with pytest.raises(BackendError, match="AuthenticationError"):
            asyncio.run(_register_and_close(backend, spec))


async def _register_and_close(backend: TinkerBackend, spec: ModelSpec) -> None:
    try:
        await backend.register(spec)
    finally:
        await backend.close()


class TestTinkerRunLease:
    """A Tinker run keeps its step record in the run directory, so it takes the run's lease
    like a Local run: a second trainer is refused before it touches the record or the service,
    and the next trainer after `close` continues at the right step."""

    def test_a_second_trainer_is_refused_and_the_next_one_continues(
        self, emulator: TinkerEmulator, tiny: str, tmp_path: Path
    ) -> None:
        import os

        import arthex
        from arthex.core.errors import RunBusyError
        from arthex.ports.training_backend import Capability
        from arthex.testing.builders import synthetic_groups

        def model() -> arthex.TrainableModel:
            return arthex.TrainableModel(
                name="leased",
                project="tinker",
                base_model=tiny,
                base_path=str(tmp_path),
                report_metrics=[],
            )

        def backend() -> TinkerBackend:
            return TinkerBackend(
                base_url=emulator.base_url, api_key=KEY, timeout_s=TIMEOUT_S, serve=False
            )

        async def go() -> tuple[str, bytes, bytes, int, int]:
            first, first_backend = model(), backend()
            assert Capability.ONE_TRAINER in first_backend.capabilities
            await first.register(first_backend)
            await first.train(synthetic_groups())
            record = tmp_path / "tinker" / "models" / "leased" / "tinker-run.json"
            before = record.read_bytes()
            second, second_backend = model(), backend()
            with pytest.raises(RunBusyError) as refused:
                await second.register(second_backend)
            after = record.read_bytes()
            await second_backend.close()
            await first.close()
            await first_backend.close()
            third, third_backend = model(), backend()
            try:
                await third.register(third_backend)
                start = await third.get_step()
                end = (await third.train(synthetic_groups(offset=1))).step
            finally:
                await third.close()
                await third_backend.close()
            return str(refused.value), before, after, start, end

        message, before, after, start, end = asyncio.run(go())
        assert f"pid {os.getpid()} on host" in message
        assert after == before
        assert (start, end) == (1, 2)


def test_sft_with_more_batches_than_in_flight_trains_each_once_in_order(
    emulator: TinkerEmulator, tiny: str, tmp_path: Path
) -> None:
    from arthex.adapters.tinker.sft import MAX_IN_FLIGHT
    from arthex.core.conversations import conversation_from
    from arthex.core.sft import TrainSFTConfig

    data = [
        conversation_from([{"role": "user", "content": q}, {"role": "assistant", "content": a}])
        for q, a in (("a?", "one"), ("b?", "two"), ("c?", "three"))
    ]
    batches = 3 * 4  # batch_size 1, 4 epochs
    assert batches > MAX_IN_FLIGHT
    rates = [1e-4 * (i + 1) for i in range(batches)]
    spec = ModelSpec(RunRef("sft", "window"), base_model=tiny, base_path=str(tmp_path))
    backend = TinkerBackend(
        base_url=emulator.base_url, api_key=KEY, timeout_s=TIMEOUT_S, serve=False
    )
    before = emulator.route_counts["POST forward_backward"]

    async def main() -> tuple[list[float], int]:
        try:
            await backend.register(spec)
            config = TrainSFTConfig(learning_rate=rates, batch_size=1, epochs=4)
            seen = [
                m["loss/learning_rate"] async for m in backend.train_sft(spec.run, data, config)
            ]
            return seen, await backend.get_step(spec.run)
        finally:
            await backend.close()

    seen, step = asyncio.run(main())
    assert seen == pytest.approx(rates)
    assert step == 1
    assert emulator.route_counts["POST forward_backward"] - before == batches


def test_a_trained_tinker_run_refuses_another_base_model_before_anything_changes(
    emulator: TinkerEmulator, tiny: str, tmp_path: Path
) -> None:
    """The core's check (model.json and the history), before the lease or the service."""
    import arthex
    from arthex.core.errors import BaseModelChangedError
    from arthex.testing.builders import synthetic_groups
    from tests.unit.test_run_base_model import tree_digest

    def model(base_model: str) -> arthex.TrainableModel:
        return arthex.TrainableModel(
            name="agent",
            project="proj",
            base_model=base_model,
            base_path=str(tmp_path),
            report_metrics=[],
        )

    async def main() -> None:
        backend = TinkerBackend(base_url=emulator.base_url, api_key=KEY, timeout_s=TIMEOUT_S)
        first = model(tiny)
        try:
            await first.register(backend)
            await first.train(synthetic_groups(), progress=False)
        finally:
            await first.close()
            await backend.close()
        before = tree_digest(tmp_path / "proj" / "models" / "agent")
        backend = TinkerBackend(base_url=emulator.base_url, api_key=KEY, timeout_s=TIMEOUT_S)
        other = model("org/another-model")
        try:
            with pytest.raises(BaseModelChangedError, match="start a new run under another name"):
                await other.register(backend)
        finally:
            await other.close()
            await backend.close()
        assert tree_digest(tmp_path / "proj" / "models" / "agent") == before

    asyncio.run(main())


def test_a_tinker_run_at_step_0_keeps_its_base_model_and_logs_no_change(
    emulator: TinkerEmulator, tiny: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Tinker's run keeps the base model its service session was made from, even before a
    step: the backend refuses, and the core does not claim the base model changed."""
    import arthex
    from arthex.core.errors import InvalidInputError

    def model(base_model: str) -> arthex.TrainableModel:
        return arthex.TrainableModel(
            name="agent", project="proj", base_model=base_model, base_path=str(tmp_path),
            report_metrics=[],
        )  # fmt: skip

    async def main() -> None:
        backend = TinkerBackend(base_url=emulator.base_url, api_key=KEY, timeout_s=TIMEOUT_S)
        first = model(tiny)
        try:
            await first.register(backend)
        finally:
            await first.close()
            await backend.close()
        backend = TinkerBackend(base_url=emulator.base_url, api_key=KEY, timeout_s=TIMEOUT_S)
        other = model("org/another-model")
        try:
            with pytest.raises(InvalidInputError, match="was trained from base model"):
                await other.register(backend)
        finally:
            await other.close()
            await backend.close()

    with caplog.at_level("WARNING"):
        asyncio.run(main())
    assert not any("nothing trained yet" in record.getMessage() for record in caplog.records)
