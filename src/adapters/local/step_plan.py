"""How a process runs one optimizer step's rows: which micro-batches, and what it reduces.

The single-process trainer runs every row itself (`WholeBatch`); a sharded trainer swaps in a
split that gives each rank its share and sums the ranks' results (distributed/sharded.py).
"""

from __future__ import annotations

import attrs
import torch

from .loss import LossStats
from .packing import PackedBatch


class WholeBatch:
    """How one process trains a step: every row itself, nothing to reduce. Sharded trainers
    swap in a split that gives each rank its share and sums the ranks' results."""

    def plan(
        self, chunk_rows: list[int], micro_rows: int, *, whole_micro_batches: bool = False
    ) -> list[list[int]]:
        """The micro-batches (batch row indices) this process runs for one optimizer step;
        an empty one is a pass that adds nothing but keeps collectives in step.

        `whole_micro_batches`: a split must hand out this process's micro-batches unchanged
        (the KL penalty's mean is taken per micro-batch, so regrouping rows would change it)."""
        return micro_batches(chunk_rows, micro_rows)

    def reduce(self, stats: LossStats) -> LossStats:
        return stats

    def clip_grad_norm(self, params: list[torch.nn.Parameter], limit: float) -> float:
        return float(torch.nn.utils.clip_grad_norm_(params, limit).item())


def micro_batches(rows: list[int], micro_rows: int) -> list[list[int]]:
    return [rows[i : i + micro_rows] for i in range(0, len(rows), micro_rows)]


def part_of(batch: PackedBatch, micro: list[int], chunk_rows: list[int]) -> PackedBatch:
    """The micro-batch's rows; an empty micro-batch is the step's first row with nothing to
    learn from (no completion tokens), so its pass adds exactly zero to every gradient."""
    if micro:
        return batch.rows(micro)
    idle = batch.rows(chunk_rows[:1])
    return attrs.evolve(idle, mask=torch.zeros_like(idle.mask))
