"""Supervised fine-tuning and export, as use cases of a TrainableModel: `train_sft` makes one
step of the run like an RL update (checkpoint, history rows, served at the new step) and
`export` writes a step in a standard format through a backend that can.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..ports.training_backend import (
    Capability,
    ExportFormat,
    ModelExporter,
    SupervisedFineTuning,
    TrainingBackend,
)
from ..ports.training_backend import supervised as supervised_backend
from .conversations import Conversation, conversations_from
from .errors import InvalidInputError, UnsupportedCapability
from .identity import RunRef
from .metrics import MetricsRow
from .model import Model, TrainResult
from .progress import ProgressLine
from .sft import SFT_TIME_KEY, TrainSFTConfig, sft_rows
from .training_row import training_values

logger = logging.getLogger("arthex")


async def collect_updates(
    backend: SupervisedFineTuning,
    run: RunRef,
    conversations: Sequence[Conversation],
    config: TrainSFTConfig,
    *,
    description: str,
    progress: bool | None,
) -> list[dict[str, float]]:
    """Drive the backend's SFT update, one metrics dict per gradient step."""
    bar = ProgressLine(description, None, enabled=progress)
    samples: list[dict[str, float]] = []
    try:
        async for sample in backend.train_sft(run, conversations, config):
            samples.append(dict(sample))
            loss = sample.get("loss/train")
            bar.advance(note="" if loss is None else f"loss={loss:.4g}")
    finally:
        bar.close()
    return samples


class FineTuning(Model):
    """The layer of TrainableModel that fine-tunes and exports. What it uses of the trained
    model (its backend, its lock, the step bookkeeping) TrainableModel provides."""

    _train_lock: asyncio.Lock
    _step: int | None

    @property
    def backend(self) -> TrainingBackend:
        raise NotImplementedError

    async def _repair_training_row(self, step: int) -> None:
        raise NotImplementedError

    async def _advanced_from(self, step: int) -> int:
        raise NotImplementedError

    async def train_sft(
        self,
        trajectories: Iterable[object],
        config: TrainSFTConfig | Mapping[str, Any] | None = None,
        *,
        verbose: bool = False,
        progress: bool | None = None,
    ) -> TrainResult:
        """Supervised fine-tuning as one step of the run (see core/sft.py): train on the
        conversations (Trajectory objects, OpenAI fine-tuning records or message lists) with
        the loss on assistant tokens, then record each gradient step under `sft/` and the
        means as the new step's training row. The new step is served like an RL step's.
        `config` is a TrainSFTConfig or a mapping of its fields."""
        backend = self.backend
        trainer = supervised_backend(backend)
        config = TrainSFTConfig.model_validate(config) if config is not None else TrainSFTConfig()
        conversations = conversations_from(trajectories)
        config.plan(len(conversations))  # a bad learning-rate list fails before any work
        await self._start_mirrors()  # a mirror that cannot start fails before paid work
        async with self._train_lock:
            step = await backend.get_step(self.run)
            await self._repair_training_row(step)
            self._record_config({"train_sft": config.to_json()})
            started = time.monotonic()
            samples = await collect_updates(
                trainer,
                self.run,
                conversations,
                config,
                description=f"sft step {step} -> {step + 1}: gradient step",
                progress=progress,
            )
            elapsed = time.monotonic() - started
            new_step = await self._advanced_from(step)
            for sft_row in sft_rows(new_step, samples):
                await self._report(sft_row)
            values = training_values(samples, {SFT_TIME_KEY: elapsed})
            values.update(await self._running_totals(values))
            row = MetricsRow(step=new_step, values=values)
            await self._report(row)
            self._step = new_step
            if verbose:
                logger.info("fine-tuned step %d -> %d in %.1fs", step, new_step, elapsed)
            return TrainResult(step=new_step, metrics=row.values)

    async def export(
        self,
        out_dir: str,
        *,
        step: int | None = None,
        format: ExportFormat = "merged",
    ) -> str:
        """Write step `step` (latest when None) into the new folder `out_dir`: "merged" a
        Hugging Face model directory that `transformers` loads without arthex, "peft" a PEFT
        adapter directory (LoRA runs). Returns the folder."""
        if format not in ("peft", "merged"):
            raise InvalidInputError(f"format must be 'peft' or 'merged', got {format!r}")
        backend = self.backend
        if Capability.EXPORT not in backend.capabilities or not isinstance(backend, ModelExporter):
            raise UnsupportedCapability(
                "export",
                type(backend).__name__,
                "Export needs the checkpoints' files: with LocalBackend call model.export; a "
                "training server's runs are exported on the server (`arthex export`); a Tinker "
                "run's weights live in the Tinker service",
            )
        return await backend.export(self.run, out_dir, step=step, format=format)
