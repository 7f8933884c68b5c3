"""LocalBackend against the whole TrainingBackendContract, on CPU with the tiny model."""

from __future__ import annotations

import pytest

from arthex.adapters.local import LocalBackend
from arthex.ports.training_backend import TrainingBackend
from arthex.testing.contracts.training_backend import TrainingBackendContract
from arthex.testing.tiny_model import tiny_model


@pytest.mark.e2e
class TestLocalBackendContract(TrainingBackendContract):
    @pytest.fixture
    def backend(self) -> TrainingBackend:
        return LocalBackend(full_finetune=True)

    @pytest.fixture
    def restart_backend(self) -> TrainingBackend:
        return LocalBackend(full_finetune=True)

    @pytest.fixture
    def base_model(self, tmp_path_factory: pytest.TempPathFactory) -> str:
        return tiny_model(tmp_path_factory.getbasetemp() / "contract-tiny")


@pytest.mark.e2e
@pytest.mark.slow
class TestLocalBackendTwoRanksContract(TrainingBackendContract):
    """The same contract with the model sharded over two rank processes (gloo on the CPU)."""

    @pytest.fixture
    def backend(self) -> TrainingBackend:
        return LocalBackend(full_finetune=True, world_size=2)

    @pytest.fixture
    def restart_backend(self) -> TrainingBackend:
        return LocalBackend(full_finetune=True, world_size=2)

    @pytest.fixture
    def base_model(self, tmp_path_factory: pytest.TempPathFactory) -> str:
        return tiny_model(tmp_path_factory.getbasetemp() / "contract-tiny")
