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
    """The same contract with the model sharded over two rank processes (gloo on the CPU).

    Each test starts two rank processes (about 20 s on two cores; the whole contract, about
    ten minutes). CI runs the tests where the ranks change what happens: a step trained and
    reduced over both, a reward's gradient, SFT then RL, the checkpoint the ranks write and a
    restart reads, and a step's weights served; `make test-extended` runs all of them.
    """

    ci_tests = frozenset(
        {
            "test_train_advances_the_step_by_one_and_yields_metrics",
            "test_rewarding_a_completion_raises_its_probability",
            "test_sft_then_rl_continue_one_run",
            "test_restart_resumes_from_the_newest_checkpoint",
            "test_step_names_resolve_to_that_steps_weights",
        }
    )

    @pytest.fixture
    def backend(self) -> TrainingBackend:
        return LocalBackend(full_finetune=True, world_size=2)

    @pytest.fixture
    def restart_backend(self) -> TrainingBackend:
        return LocalBackend(full_finetune=True, world_size=2)

    @pytest.fixture
    def base_model(self, tmp_path_factory: pytest.TempPathFactory) -> str:
        return tiny_model(tmp_path_factory.getbasetemp() / "contract-tiny")
