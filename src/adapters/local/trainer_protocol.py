"""The trainer the backend drives, whichever process or processes hold the model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from ...core.errors import InvalidInputError
from .update import Update

__all__ = ["Trainer", "Update", "make_trainer"]

if TYPE_CHECKING:
    from .distributed.world import World
    from .trainer import TrainerSettings


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
