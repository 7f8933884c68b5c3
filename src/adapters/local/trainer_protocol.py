"""The trainer the backend drives, whichever process or processes hold the model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import torch

from ...core.config import TrainConfig
from .packing import PackedBatch


class Trainer(Protocol):
    """What the backend drives: a PolicyTrainer in this process, or the handle on a group of
    sharded rank processes (distributed/trainer.py)."""

    max_length: int
    pad_token_id: int

    def load(self, checkpoint: Path | None) -> None: ...

    def train(
        self,
        batch: PackedBatch,
        config: TrainConfig,
        *,
        reference: Path | None,
        extra_metrics: dict[str, float] | None = None,
    ) -> Iterator[dict[str, float]]: ...

    def write_checkpoint(self, directory: Path) -> None: ...

    def trainer_state(self) -> dict[str, Any]: ...

    def training_tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]: ...

    def close(self) -> None: ...
