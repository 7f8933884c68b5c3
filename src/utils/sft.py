"""Supervised fine-tuning from a dataset, with ART's `art.utils.sft` names and meaning: chunks
of a trajectory list with their slice of one learning-rate schedule
(`create_sft_dataset_iterator`), a JSONL file streamed with a shuffle buffer (`iterate_file`),
and `train_sft_from_file`, which trains on a file through `model.train_sft`.

The schedule is `arthex.create_lr_schedule` (ART's formula) over every batch of every epoch,
with `int(batches * warmup_ratio)` warmup batches; a chunk or a resumed run gets its slice of
it, so warmup and decay are the same however the training is cut up.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from ..core.errors import InvalidInputError
from ..core.progress import ProgressLine
from ..core.sft import TrainSFTConfig, create_lr_schedule
from ..core.trajectories import Trajectory

if TYPE_CHECKING:
    from ..core.trainable import TrainableModel

__all__ = [
    "SFTChunk",
    "create_lr_schedule",
    "create_sft_dataset_iterator",
    "get_file_row_count",
    "iterate_file",
    "resolve_sft_batch_size",
    "train_sft_from_file",
]

Schedule = Literal["cosine", "linear", "constant"]


class SFTChunk(NamedTuple):
    """One `train_sft` call's worth: its trajectories, a config with one learning rate per
    batch, and where it starts (global batch `step`, `epoch`, batch within the epoch)."""

    trajectories: list[Trajectory]
    config: TrainSFTConfig
    step: int
    epoch: int
    epoch_step: int


def resolve_sft_batch_size(*, batch_size: int | Literal["auto"], default_batch_size: int) -> int:
    """`batch_size`, or `default_batch_size` for "auto"."""
    return default_batch_size if batch_size == "auto" else batch_size


def _jsonl_only(file_path: str) -> None:
    if not file_path.endswith(".jsonl"):
        raise ValueError(f"Only JSONL files are supported. Got: {file_path}")


def get_file_row_count(file_path: str) -> int:
    """The non-blank lines of a `.jsonl` file (ValueError for another suffix)."""
    _jsonl_only(file_path)
    with open(file_path, encoding="utf-8") as file:
        return sum(1 for line in file if line.strip())


def _schedule(batches: int, peak_lr: float, method: Schedule, warmup_ratio: float) -> list[float]:
    return create_lr_schedule(batches, peak_lr, method, warmup_steps=int(batches * warmup_ratio))


def create_sft_dataset_iterator(
    trajectories: list[Trajectory],
    chunk_size: int = 10,
    epochs: int = 1,
    batch_size: int = 2,
    peak_lr: float = 2e-4,
    schedule_type: Schedule = "linear",
    warmup_ratio: float = 0.1,
    shuffle: bool = True,
    seed: int = 42,
    initial_step: int = 0,
    show_progress: bool = True,
) -> Iterator[SFTChunk]:
    """Chunks of `chunk_size` batches of `batch_size` trajectories, epoch after epoch (each
    epoch shuffled with `Random(seed + epoch)` when `shuffle`), from the chunk holding batch
    `initial_step` on: `await model.train_sft(chunk.trajectories, chunk.config)` for each."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if not trajectories:
        return
    per_epoch = math.ceil(len(trajectories) / batch_size)
    schedule = _schedule(per_epoch * epochs, peak_lr, schedule_type, warmup_ratio)
    per_chunk = batch_size * chunk_size
    chunks_per_epoch = math.ceil(len(trajectories) / per_chunk)
    bar = ProgressLine("SFT training", per_epoch * epochs, enabled=None if show_progress else False)
    bar.done = initial_step
    try:
        for epoch in range(epochs):
            order = list(trajectories)
            if shuffle:
                random.Random(seed + epoch).shuffle(order)
            for chunk in range(chunks_per_epoch):
                if epoch * chunks_per_epoch + chunk < initial_step // chunk_size:
                    continue
                start = chunk * per_chunk
                items = order[start : start + per_chunk]
                step = epoch * per_epoch + start // batch_size
                batches = math.ceil(len(items) / batch_size)
                config = TrainSFTConfig(
                    learning_rate=tuple(schedule[step : step + batches]), batch_size=batch_size
                )
                yield SFTChunk(items, config, step, epoch, start // batch_size)
                for _ in range(batches):
                    bar.advance()
    finally:
        bar.close()


def _trajectory(line: str) -> Trajectory:
    record = json.loads(line)
    return Trajectory(messages_and_choices=record.get("messages", []), tools=record.get("tools"))


def iterate_file(
    file_path: str,
    epochs: int = 1,
    shuffle_buffer_size: int = 10000,
    seed: int = 42,
    initial_skip: int = 0,
) -> Iterator[Trajectory]:
    """The conversations of a `.jsonl` file (`messages`, optional `tools` per line), for
    `epochs` passes, without holding the file in memory: each pass fills a buffer of
    `shuffle_buffer_size` and, once full, yields a random one of it per line read
    (`Random(seed + epoch)`), then the rest shuffled. The first `initial_skip` are skipped."""
    _jsonl_only(file_path)
    skipped = 0
    for epoch in range(epochs):
        rng = random.Random(seed + epoch)
        buffer: list[Trajectory] = []
        drawn: list[Trajectory] = []
        with open(file_path, encoding="utf-8") as file:
            for line in file:
                if not line.strip():
                    continue
                buffer.append(_trajectory(line))
                if len(buffer) >= shuffle_buffer_size:
                    drawn.append(buffer.pop(rng.randint(0, len(buffer) - 1)))
                for item in drawn:
                    if skipped < initial_skip:
                        skipped += 1
                    else:
                        yield item
                drawn.clear()
        rng.shuffle(buffer)
        for item in buffer:
            if skipped < initial_skip:
                skipped += 1
            else:
                yield item


async def train_sft_from_file(
    model: TrainableModel,
    file_path: str,
    epochs: int = 1,
    batch_size: int = 2,
    peak_lr: float = 2e-4,
    schedule_type: Schedule = "linear",
    warmup_ratio: float = 0.1,
    initial_step: int = 0,
    final_step: int | None = None,
    _config: Any = None,
    verbose: bool = False,
    shuffle_buffer_size: int = 10000,
    log_metrics: bool = True,
    assistant_turns: Literal["all", "last"] = "all",
) -> None:
    """Fine-tune `model` on a JSONL file, streamed: batches `initial_step` up to `final_step`
    (exclusive; None: the end) of `epochs` passes, each batch at its rate of one schedule over
    every batch, in one `model.train_sft` call (one new step). Nothing to train on (an empty
    file, or `initial_step` past the end) does nothing. arthex records every gradient step
    under `sft/` whatever `log_metrics` says; `_config` (ART's experimental settings) is
    ignored with a warning."""
    if _config is not None:
        warnings.warn("train_sft_from_file(_config=...) is ignored: set SFT options on "
                      "arthex.TrainSFTConfig", UserWarning, stacklevel=2)  # fmt: skip
    if batch_size < 1:
        raise InvalidInputError(f"batch_size must be >= 1, got {batch_size}")
    rows = get_file_row_count(file_path)
    total = rows * epochs
    skip = initial_step * batch_size
    if rows == 0 or skip >= total:
        if verbose:
            print("No trajectories to train on" if rows == 0 else
                  f"initial_step {initial_step} skips all trajectories")  # fmt: skip
        return
    batches = math.ceil(total / batch_size)
    rates = _schedule(batches, peak_lr, schedule_type, warmup_ratio)[
        initial_step : None if final_step is None else min(final_step, batches)
    ]
    if not rates:
        return
    if verbose:
        print(f"Training {len(rates) * batch_size} trajectories in {len(rates)} batches of "
              f"{batch_size} ({schedule_type} schedule, peak {peak_lr})")  # fmt: skip
    stream = itertools.islice(
        iterate_file(file_path, epochs, shuffle_buffer_size, initial_skip=skip),
        len(rates) * batch_size,
    )
    config = TrainSFTConfig(
        learning_rate=tuple(rates), batch_size=batch_size, assistant_turns=assistant_turns
    )
    await model.train_sft(stream, config, verbose=verbose)
