"""The trainer the backend drives, whichever process or processes hold the model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import torch

from ...core.config import CustomLoss, TrainConfig
from ...core.errors import InvalidInputError
from .packing import PackedBatch

if TYPE_CHECKING:
    from .distributed.world import World
    from .trainer import TrainerSettings


@attrs.frozen
class Update:
    """What one train call trains on: the packed batch and its config, the KL reference
    checkpoint (None: the base weights; used only when the config's KL coefficient is > 0),
    and a custom loss that replaces the config's (loss.custom_token_loss)."""

    batch: PackedBatch
    config: TrainConfig
    reference: Path | None
    custom_loss: CustomLoss | None = None


class Trainer(Protocol):
    """What the backend drives: a PolicyTrainer in this process, or the handle on a group of
    sharded rank processes (distributed/trainer.py)."""

    max_length: int
    pad_token_id: int
    fresh_optimizer_for: Path | None
    """The checkpoint loaded without optimizer state (a foreign adapter), if any."""

    def load(self, checkpoint: Path | None) -> None: ...

    def train(self, update: Update) -> Iterator[dict[str, float]]: ...

    def write_checkpoint(self, directory: Path) -> None: ...

    def trainer_state(self) -> dict[str, Any]: ...

    def training_tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]: ...

    def close(self) -> None: ...


def make_trainer(settings: TrainerSettings, world: World | None, *, runs_open: int) -> Trainer:
    """In this process, or a group of sharded rank processes when a world was asked for."""
    if world is None:
        from .trainer import PolicyTrainer

        return PolicyTrainer(settings)
    if world.multi_node and runs_open:
        raise InvalidInputError(
            "a LocalBackend whose ranks span several machines trains one run (the other "
            "machines start that run's ranks); create another backend, with its own "
            "master_port, for another run"
        )
    from .distributed.trainer import DistributedTrainer

    return DistributedTrainer(settings, world)
