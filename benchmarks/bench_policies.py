"""History policies: the per-step cost of the LR multiplier plus the retention decision.

Baseline (what the reference does each step): re-read history.jsonl with polars, take the
per-step mean of `train/reward_std_dev`, fit a line with numpy, and for retention re-read
and take the best per-step mean of `val/reward`. arthex: the history index, built once,
updated with each new row, and the incremental policies reading it.
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from arthex.adapters.jsonl_history import encode_row
from arthex.core.history_index import HistoryIndex
from arthex.core.lr_policy import REWARD_STD_DEV_KEY, RewardStdDevPolicy
from arthex.core.metrics import MetricsRow
from arthex.core.retention import BestStep, decide

from ._table import best_of, print_table

SIZES = (1_000, 10_000, 20_000)
STEPS_TIMED = 500


def make_rows(n: int, seed: int = 0) -> list[MetricsRow]:
    """Two rows per step, like a train/eval loop: train metrics, then an evaluation."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        step = i // 2
        if i % 2 == 0:
            values = {
                REWARD_STD_DEV_KEY: 0.5 - step * 1e-5 + rng.uniform(-0.01, 0.01),
                "train/reward": rng.random(),
                "loss/train": rng.random(),
            }
        else:
            values = {"val/reward": rng.random()}
        rows.append(MetricsRow(step=step, values=values))
    return rows


def reference_step(path: Path) -> tuple[float, int]:
    frame = pl.read_ndjson(path, infer_schema_length=None)
    stds = (
        frame.filter(pl.col(REWARD_STD_DEV_KEY).is_not_null())
        .group_by("step")
        .agg(pl.col(REWARD_STD_DEV_KEY).mean())
        .sort("step")
    )
    multiplier = 1.0
    if stds.height >= 2:
        slope, intercept = np.polyfit(
            stds["step"].to_numpy(), stds[REWARD_STD_DEV_KEY].to_numpy(), 1
        )
        if intercept > 0:
            multiplier = float((slope * stds["step"][-1] + intercept) / intercept)
    frame = pl.read_ndjson(path, infer_schema_length=None)
    best = (
        frame.filter(pl.col("val/reward").is_not_null())
        .group_by("step")
        .agg(pl.col("val/reward").mean())
        .sort(["val/reward", "step"])
    )
    return multiplier, int(best["step"][-1])


def incremental_step(history: list[MetricsRow], arriving: list[MetricsRow]) -> float:
    """Seconds per training step once the index exists: two new rows, both decisions."""
    index = HistoryIndex(history)
    policy, best = RewardStdDevPolicy(), BestStep("max")
    index.subscribe(REWARD_STD_DEV_KEY, policy)
    index.subscribe("val/reward", best)
    started = time.perf_counter()
    for row in arriving:
        index.observe(row)
        if REWARD_STD_DEV_KEY in row.values:
            policy.multiplier()
            decide(best.step, latest=row.step, metric="val/reward")
    return (time.perf_counter() - started) / (len(arriving) / 2)


def run() -> list[list[object]]:
    table: list[list[object]] = []
    for size in SIZES:
        rows = make_rows(size + 2 * STEPS_TIMED)
        history, arriving = rows[:size], rows[size:]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "history.jsonl"
            path.write_bytes(b"".join(encode_row(r) for r in history))
            baseline = best_of(3, lambda p=path: reference_step(p))  # type: ignore[misc]

        build = best_of(3, lambda h=history: HistoryIndex(h))  # type: ignore[misc]
        per_step = min(incremental_step(history, arriving) for _ in range(3))
        table.append(
            [f"{size:,}", baseline * 1e3, per_step * 1e6, baseline / per_step, build * 1e3]
        )
    return table


def main() -> None:
    table = run()
    print_table(
        "History policies: LR multiplier + retention decision, per training step",
        [
            "history rows",
            "reference: re-read + re-fit (ms/step)",
            "arthex (µs/step)",
            "ratio (x cheaper)",
            "arthex one-time index build (ms)",
        ],
        table,
    )


if __name__ == "__main__":
    main()
