"""Batches of a fixed dataset, epoch after epoch, in an order that a resumed run repeats.

The order of epoch `e` is `range(len(dataset))` shuffled by `random.Random(e)` for the
default `seed=0`: the order ART's `iterate_dataset` uses, so a run started with ART and
resumed with arthex (or the other way round) sees the same batches at the same steps. Another
seed uses `random.Random(f"{seed}/{e}")`: a string seed is hashed, so no (seed, epoch) pair
repeats another's order (integer seeds like `(seed << 32) + e` do collide in Python's
Mersenne Twister: `Random(2)` and `Random(2**32 + 2)` draw the same numbers).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..core.errors import InvalidInputError
from ..core.progress import ProgressLine

T = TypeVar("T")


@dataclass
class DatasetBatch(Generic[T]):
    """One step's items: `step` counts over all epochs, `epoch_step` within the epoch."""

    items: list[T]
    step: int
    epoch: int
    epoch_step: int


def _count(value: object, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


def epoch_order(size: int, epoch: int, *, seed: int = 0, shuffle: bool = True) -> list[int]:
    """The indices of one epoch, in the order `iterate_dataset` visits them."""
    indices = list(range(size))
    if shuffle:
        random.Random(epoch if seed == 0 else f"{seed}/{epoch}").shuffle(indices)
    return indices


def iterate_dataset(
    dataset: Sequence[T] | Iterable[T],
    groups_per_step: int = 1,
    num_epochs: int = 1,
    initial_step: int = 0,
    use_tqdm: bool = True,
    *,
    shuffle: bool = True,
    seed: int = 0,
) -> Iterator[DatasetBatch[T]]:
    """Yield `groups_per_step` items per step for `num_epochs` epochs, from `initial_step` on.

    Each epoch visits every item once in a freshly shuffled order (`shuffle=False` keeps the
    dataset's order); the last batch of an epoch may be smaller. Steps before `initial_step`
    are skipped without being yielded, so `initial_step=await model.get_step()` resumes a run
    where it stopped. `use_tqdm` shows a progress line on a terminal (the name is ART's; no
    tqdm is needed). Arguments are checked before the first batch is built.
    """
    items = list(dataset)
    _count(groups_per_step, "groups_per_step", 1)
    _count(num_epochs, "num_epochs", 0)
    _count(initial_step, "initial_step", 0)
    _count(seed, "seed", 0)
    return _batches(items, groups_per_step, num_epochs, initial_step, use_tqdm, shuffle, seed)


def _batches(
    items: list[T],
    per_step: int,
    num_epochs: int,
    initial_step: int,
    use_tqdm: bool,
    shuffle: bool,
    seed: int,
) -> Iterator[DatasetBatch[T]]:
    if not items:
        return
    steps_per_epoch = math.ceil(len(items) / per_step)
    total = steps_per_epoch * num_epochs
    bar = ProgressLine("iterating dataset", total, enabled=None if use_tqdm else False)
    bar.done = min(initial_step, total)
    try:
        for epoch in range(initial_step // steps_per_epoch, num_epochs):
            order = epoch_order(len(items), epoch, seed=seed, shuffle=shuffle)
            for epoch_step in range(steps_per_epoch):
                step = epoch * steps_per_epoch + epoch_step
                if step < initial_step:
                    continue
                chosen = order[epoch_step * per_step : (epoch_step + 1) * per_step]
                yield DatasetBatch(
                    items=[items[i] for i in chosen], step=step, epoch=epoch, epoch_step=epoch_step
                )
                bar.advance()
    finally:
        bar.close()
