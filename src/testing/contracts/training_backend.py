"""TrainingBackendContract: what every training backend does, ours and third parties' alike.

    class TestMyBackend(TrainingBackendContract):
        @pytest.fixture
        def backend(self, tmp_path): return MyBackend(root=tmp_path)

The contract is made of one mixin per topic, each usable alone: `StepContract`
(backend_steps.py), `LifecycleContract` (backend_lifecycle.py), `ServingContract`
(backend_serving.py), `CheckpointServingContract` (backend_checkpoints.py) and
`SupervisedFineTuningContract` (sft.py); their fixtures and hooks
are in backend_base.py, the scenario runner in scenario.py.
"""

from __future__ import annotations

from .backend_checkpoints import CheckpointServingContract
from .backend_lifecycle import LifecycleContract
from .backend_serving import ServingContract
from .backend_steps import StepContract
from .sft import SupervisedFineTuningContract


class TrainingBackendContract(
    StepContract,
    LifecycleContract,
    ServingContract,
    CheckpointServingContract,
    SupervisedFineTuningContract,
):
    """Mix into a test class and override `backend`: every topic's tests come with it."""


__all__ = ["TrainingBackendContract"]
