"""The in-memory backend shipped with the kit passes the same contract as the real ones."""

from __future__ import annotations

import pytest

from arthex.ports.training_backend import TrainingBackend
from arthex.testing.contracts.training_backend import TrainingBackendContract
from arthex.testing.fakes.backend import InMemoryBackend


class TestInMemoryBackend(TrainingBackendContract):
    @pytest.fixture
    def backend(self) -> TrainingBackend:
        return InMemoryBackend()


class TestInMemoryBackendWithoutPpo(TrainingBackendContract):
    """A backend lacking capabilities: the kit checks that they are refused, not ignored."""

    @pytest.fixture
    def backend(self) -> TrainingBackend:
        return InMemoryBackend(losses=("cispo",), sft=False)
