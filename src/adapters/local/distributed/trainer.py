"""DistributedTrainer: what the backend drives when a run trains on several ranks.

It has the PolicyTrainer's shape (load, train, write_checkpoint, ...), so the backend's flow
is the same for one process or many, and turns each call into a command for the ranks
(supervisor.py). The frontend keeps the inference engine: ranks only train, and checkpoints
reach the engine through the run's folder, as they do with one process.

After a rank failure the ranks are gone, and `load` (which the backend calls to put the
trainer back on the newest checkpoint) only remembers the checkpoint: the ranks start again,
and load it, at the next call that needs them. So the failing call ends quickly with the
rank's error, and a failure that repeats at start-up is reported by the next call instead of
hiding the first one.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import torch

from ....core.errors import InvalidInputError
from .. import checkpoint_io
from .. import checkpoints as ckpt
from ..trainer import TrainerSettings
from ..update import Update
from .channel import encode_batch
from .supervisor import Supervisor
from .world import World


class DistributedTrainer:
    """The frontend's handle on one run's rank group."""

    def __init__(self, settings: TrainerSettings, world: World) -> None:
        self.settings = settings
        self.world = world
        self.full_finetune = False
        self.max_length = 0
        self.pad_token_id = 0
        self.fresh_optimizer_for: Path | None = None
        self._source: Path | None = None
        self._loaded = False
        self._trained = False  # since the last load: the ranks' Adam then holds RL's moments
        self._state: dict[str, Any] = {}  # rank 0's trainer_state after its last load
        self._log_dir = Path(tempfile.mkdtemp(prefix="arthex-ranks-"))
        config = {"settings": attrs.asdict(settings)}
        self.supervisor = Supervisor(world, config, self._log_dir)

    # --- the PolicyTrainer shape ----------------------------------------------------------

    def load(self, checkpoint: Path | None) -> None:
        foreign = checkpoint is not None and ckpt.foreign_adapter(checkpoint)
        self.fresh_optimizer_for = checkpoint if foreign else None
        self._source = checkpoint
        self._loaded = False
        self._trained = False
        if not self.supervisor.failed:
            self._ready()

    def train(self, update: Update) -> Iterator[dict[str, float]]:
        if update.custom_loss is not None:  # refused by the backend before a step starts
            raise InvalidInputError("a custom loss_fn trains in one process only")
        self._ready()
        self._trained = True
        reference = update.reference
        args = {
            "config": attrs.asdict(update.config),
            "reference": str(reference) if reference is not None else None,
        }
        for kind, data in self.supervisor.call("train", args, blob=encode_batch(update.batch)):
            if kind == "step":
                yield {str(k): float(v) for k, v in data.items()}

    def write_checkpoint(self, directory: Path) -> None:
        """Rank 0 writes the gathered state into `directory` (it runs on this machine)."""
        self._ready()
        self.supervisor.run("save", {"directory": str(directory)})

    def trainer_state(self) -> dict[str, Any]:
        """Rank 0's account of the checkpoint it loaded (the adapter's own shape, whose
        moments Adam holds); ranks only run RL steps, so after one Adam's moments are RL's
        (a later single-process SFT call then starts its optimizer afresh)."""
        self._ready()
        state = dict(self._state)
        if self._trained:
            state["optimizer_mode"] = "rl"
        return state

    def training_tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The ranks' live state, gathered by rank 0 into a scratch folder and read back."""
        from safetensors.torch import load_file

        self._ready()
        scratch = Path(tempfile.mkdtemp(prefix="arthex-tensors-"))
        try:
            self.supervisor.run("tensors", {"directory": str(scratch)})
            weights = checkpoint_io.load_weights(scratch / ckpt.WEIGHTS_FILE)
            optimizer: dict[str, torch.Tensor] = load_file(str(scratch / ckpt.OPTIMIZER_FILE))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return weights, optimizer

    def close(self) -> None:
        self.supervisor.close()
        shutil.rmtree(self._log_dir, ignore_errors=True)

    # --- internals ------------------------------------------------------------------------

    def _ready(self) -> None:
        """Ranks running and holding the checkpoint last asked for."""
        if not self.supervisor.running:
            self._loaded = False
            self.supervisor.start()
        if not self._loaded:
            source = str(self._source) if self._source is not None else None
            result = self.supervisor.run("load", {"checkpoint": source})
            self.full_finetune = bool(result["full_finetune"])
            self.max_length = int(result["max_length"])
            self.pad_token_id = int(result["pad_token_id"])
            self._state = dict(result["state"])
            self._loaded = True
