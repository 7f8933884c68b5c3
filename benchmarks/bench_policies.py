"""History policies: the per-step cost of the LR multiplier plus the retention decision.

Baseline (what the reference does each step): re-read history.jsonl with polars, take the
per-step mean of `train/reward_std_dev`, fit a line with numpy, and for retention re-read
and take the best per-step mean of `val/reward`. arthex: before each decision the history
index catches up with the ledger file (`rows_since`: only the bytes appended since its last
look, here by another writer), then the incremental policies decide.

"flat" is the cost per decision at this history length over the cost at the smallest one:
near 1 means the decision does not grow with the history.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from arthex.adapters.jsonl_history import JsonlHistory, append_line, encode_row
from arthex.core.history_index import HistoryIndex
from arthex.core.identity import RunRef
from arthex.core.lr_policy import REWARD_STD_DEV_KEY, RewardStdDevPolicy
from arthex.core.metrics import MetricsRow
from arthex.core.retention import BestStep, decide

from ._table import best_of, print_table

SIZES = (1_000, 10_000, 20_000)
STEPS_TIMED = 500
RUN = RunRef("bench", "policies")


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


def incremental_step(path: Path, arriving: list[MetricsRow]) -> float:
    """Seconds per training step once the index exists: another writer appends the step's two
    rows to the ledger file, then the index catches up (inside a running event loop, as in
    `TrainableModel`) and both decisions are taken. Only the catch-up and the decisions are
    timed."""
    return asyncio.run(_incremental_step(path, arriving))


async def _incremental_step(path: Path, arriving: list[MetricsRow]) -> float:
    history = JsonlHistory(str(path.parent.parent.parent.parent))
    index = HistoryIndex()
    index.catch_up(*await history.rows_since(RUN, 0))
    policy, best = RewardStdDevPolicy(), BestStep("max")
    index.subscribe(REWARD_STD_DEV_KEY, policy)
    index.subscribe("val/reward", best)
    timings: list[float] = []
    for first, second in zip(arriving[::2], arriving[1::2]):
        append_line(path, encode_row(first))
        append_line(path, encode_row(second))
        started = time.perf_counter()
        index.catch_up(*await history.rows_since(RUN, index.cursor))
        policy.multiplier()
        decide(best.step, latest=second.step, metric="val/reward")
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)  # robust to a busy machine's stalls


def run() -> list[list[object]]:
    table: list[list[object]] = []
    smallest: float | None = None
    for size in SIZES:
        rows = make_rows(size + 2 * STEPS_TIMED)
        history, arriving = rows[:size], rows[size:]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "history.jsonl"
            path.write_bytes(b"".join(encode_row(r) for r in history))
            baseline = best_of(3, lambda p=path: reference_step(p))  # type: ignore[misc]
        build = best_of(3, lambda h=history: HistoryIndex(h))  # type: ignore[misc]
        per_step = float("inf")
        for _ in range(3):
            with tempfile.TemporaryDirectory() as tmp:
                ledger = JsonlHistory(tmp).path(RUN)
                ledger.parent.mkdir(parents=True)
                ledger.write_bytes(b"".join(encode_row(r) for r in history))
                per_step = min(per_step, incremental_step(ledger, arriving))
        smallest = per_step if smallest is None else smallest
        table.append(
            [
                f"{size:,}",
                baseline * 1e3,
                per_step * 1e6,
                baseline / per_step,
                per_step / smallest,
                build * 1e3,
            ]
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
            f"flat (cost / cost at {SIZES[0]:,} rows)",
            "arthex one-time index build (ms)",
        ],
        table,
    )


if __name__ == "__main__":
    main()
