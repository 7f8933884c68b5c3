"""One train call's input, shared by the trainer protocol and every trainer that implements it
(its own module, so that a trainer importing it does not import the protocol's factory)."""

from __future__ import annotations

from pathlib import Path

import attrs

from ...core.config import CustomLoss, TrainConfig
from .packing import PackedBatch


@attrs.frozen
class Update:
    """What one train call trains on: the packed batch and its config, the KL reference
    checkpoint (None: the base weights; used only when the config's KL coefficient is > 0),
    and a custom loss that replaces the config's (loss.custom_token_loss)."""

    batch: PackedBatch
    config: TrainConfig
    reference: Path | None
    custom_loss: CustomLoss | None = None
