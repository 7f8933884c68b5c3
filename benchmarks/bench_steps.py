"""A second log at one step: the step file is rewritten as old + new, so every group stays in
the one file ART's loaders read. What does the rewrite cost next to the first write?

The batch is the logging benchmark's (1,000 trajectories, ~100 MB of JSON). Baseline: the
first write of the batch at a fresh step (serialize, encode, publish). Measured: the same
batch written at a step whose file already holds one batch (serialize and encode the new
batch, then copy the old row groups and the new ones into a new file under the split's lock,
fsync, rename) and at a step that already holds three batches. The old rows are copied as
arrow tables, never decoded to JSON, so the extra cost is about reading and writing the
compressed old file, a fraction of serializing it again.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.core.identity import RunRef
from arthex.core.trajectories import TrajectoryGroup

from ._table import print_table
from .bench_logging import build_batch

REPEATS = 3
RUN = RunRef("bench", "steps")


def _write(store: ParquetTrajectoryStore, step: int, groups: list[TrajectoryGroup]) -> float:
    started = time.perf_counter()
    asyncio.run(store.write(RUN, "train", step, groups))
    return time.perf_counter() - started


def run() -> list[list[object]]:
    groups = build_batch()
    with tempfile.TemporaryDirectory() as tmp:
        store = ParquetTrajectoryStore(str(Path(tmp) / "art"))
        _write(store, 999, groups[:1])  # imports and first-use setup
        first, second, fourth = [], [], []
        for repeat in range(REPEATS):
            step = 10 * repeat
            first.append(_write(store, step, groups))
            second.append(_write(store, step, groups))
            _write(store, step, groups)
            fourth.append(_write(store, step, groups))
        size = Path(store.parts(RUN, "train", 0)[0].path).stat().st_size
    base = min(first)
    return [
        ["first write at a step (baseline)", base, 1.0, "-"],
        ["second write (file holds 1 batch)", min(second), min(second) / base, "<= 1.6"],
        ["fourth write (file holds 3 batches)", min(fourth), min(fourth) / base, "-"],
        [f"step file after 4 writes: {size / 1e6:.0f} MB", "", "", ""],
    ]


def main() -> None:
    print_table(
        "A further log at one step: rewrite of the step file vs a first write (best of 3)",
        ["write", "wall (s)", "x first write", "target"],
        run(),
    )


if __name__ == "__main__":
    main()
