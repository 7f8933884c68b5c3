"""Supervised fine-tuning and export, as use cases of a TrainableModel: `train_sft` makes one
step of the run like an RL update (checkpoint, history rows, served at the new step) and
`export` writes a step in a standard format through a backend that can.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

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
from .model import TrainResult
from .progress import ProgressLine
from .sft import SFT_TIME_KEY, TrainSFTConfig, sft_rows
from .training_row import training_values
from .watchdog import WATCHDOG

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
        with WATCHDOG.activity("train_sft"):
            async for sample in backend.train_sft(run, conversations, config):
                WATCHDOG.beat()
                samples.append(dict(sample))
                loss = sample.get("loss/train")
                bar.advance(note="" if loss is None else f"loss={loss:.4g}")
    finally:
        bar.close()
    return samples


class FineTunable(Protocol):
    """What fine-tuning and export use of a registered TrainableModel."""

    run: RunRef
    _train_lock: asyncio.Lock
    _step: int | None

    @property
    def backend(self) -> TrainingBackend: ...

    async def _repair_training_row(self, step: int) -> None: ...

    async def _advanced_from(self, step: int) -> int: ...

    async def _start_mirrors(self) -> None: ...

    def _record_config(self, extra: Mapping[str, Any] | None = None) -> None: ...

    async def _report(self, row: MetricsRow) -> None: ...

    async def _running_totals(self, values: Mapping[str, Any]) -> dict[str, float]: ...


async def train_sft(
    model: FineTunable,
    trajectories: Iterable[object],
    config: TrainSFTConfig,
    *,
    verbose: bool,
    progress: bool | None,
) -> TrainResult:
    """One SFT step of `model`, with `config` checked (`TrainableModel.train_sft` says what
    it does)."""
    backend = model.backend
    trainer = supervised_backend(backend)
    conversations = conversations_from(trajectories)
    config.plan(len(conversations))  # a bad learning-rate list fails before any work
    await model._start_mirrors()  # a mirror that cannot start fails before paid work
    async with model._train_lock:
        step = await backend.get_step(model.run)
        await model._repair_training_row(step)
        model._record_config({"train_sft": config.to_json()})
        started = time.monotonic()
        samples = await collect_updates(
            trainer,
            model.run,
            conversations,
            config,
            description=f"sft step {step} -> {step + 1}: gradient step",
            progress=progress,
        )
        elapsed = time.monotonic() - started
        new_step = await model._advanced_from(step)
        for sft_row in sft_rows(new_step, samples):
            await model._report(sft_row)
        values = training_values(samples, {SFT_TIME_KEY: elapsed})
        values.update(await model._running_totals(values))
        row = MetricsRow(step=new_step, values=values)
        await model._report(row)
        model._step = new_step
        if verbose:
            logger.info("fine-tuned step %d -> %d in %.1fs", step, new_step, elapsed)
        return TrainResult(step=new_step, metrics=row.values)


async def export(
    model: FineTunable,
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
    backend = model.backend
    if Capability.EXPORT not in backend.capabilities or not isinstance(backend, ModelExporter):
        raise UnsupportedCapability(
            "export",
            type(backend).__name__,
            "Export needs the checkpoints' files: LocalBackend has them, a training "
            "server whose backend has them sends them, and TinkerBackend downloads them "
            "from Tinker",
        )
    return await backend.export(model.run, out_dir, step=step, format=format)
