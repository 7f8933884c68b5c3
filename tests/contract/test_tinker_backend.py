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

pytestmark = pytest.mark.e2e

TIMEOUT_S = 120.0
KEY = "tml-contract"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


@pytest.fixture(scope="module")
def emulator(tiny: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinkerEmulator]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TINKER_TELEMETRY", "0")
        state = tmp_path_factory.mktemp("tinker-state")
        with TinkerEmulator(tiny, api_key=KEY, state_dir=str(state), torch_threads=1) as running:
            yield running


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINKER_TELEMETRY", "0")


class TestTinkerBackend(TrainingBackendContract):
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
