"""Logging: `model.log` of 1,000 trajectories against the floor and a naive writer.

The batch: 125 groups of 8 trajectories, each 20 messages of about 400 characters (a system
prompt, a user turn, 9 Choices of which 8 call a tool, 8 tool results, a closing user turn),
the tool list on every trajectory, and on every Choice the logprob of each of its ~100 tokens
(`token_id:N` tokens, `top_logprobs` empty) and its `token_ids` in `model_extra`, as an
OpenAI-compatible server returns them for training.

- floor: each trajectory's `model_dump_json()` (every field, logprobs included), written by
  pyarrow as one large_string column with zstd, as in the issue ("the least work any writer
  must do"); a second floor row turns pyarrow's dictionary attempt off, the cheapest write
  pyarrow can do of those strings.
- naive: `json.dumps(trajectory.model_dump())` per trajectory and `pa.Table.from_pylist`.
- arthex: the public `arthex.Model(report_metrics=[])` writing real parquet and jsonl to local
  disk (`model.log`, fsyncs included).

Memory is the resident-set high-water mark (VmHWM, reset through /proc/self/clear_refs) minus
the resident set just before the call: everything the call touched, Python objects, arrow
buffers and thread stacks alike (tracemalloc would miss arrow's allocator). It is taken on the
first full-size call in the process (after a one-group warm-up that pays for imports), so no
memory freed by an earlier big run is reused. The batch's serialized size is the sum of its
trajectories' `model_dump_json()` lengths.

The event loop is probed by a task that sleeps 1 ms in a loop while `model.log` runs; the gaps
between its wake-ups show how long the loop was held. For scale, the same probe runs while
the naive writer runs on the loop, as a synchronous writer would.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import arthex
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.testing.builders import WEATHER_TOOL, make_choice

from ._table import print_table

GROUPS = 125
GROUP_SIZE = 8
CHARS = 400
TOKENS_PER_CHOICE = 100  # ~4 characters per token
REPEATS = 3
_VOCABULARY = (
    "the model calls a tool with the city and unit then reads the result and answers with "
    "temperature wind humidity forecast tomorrow rain sunny cloudy degrees celsius zurich "
    "paris tokyo lagos lima because therefore however which should would could report"
)
WORDS = _VOCABULARY.split(" ")


def build_batch(seed: int = 0) -> list[TrajectoryGroup]:
    """The batch described above; built with the collector paused (its cost is not measured,
    and a million fresh objects would otherwise trigger a full collection every few ms)."""
    rng = random.Random(seed)

    def text() -> str:
        return " ".join(rng.choices(WORDS, k=CHARS // 6))[:CHARS].ljust(CHARS, ".")

    def trajectory(number: int) -> Trajectory:
        items: list[Any] = [{"role": "system", "content": text()}]
        for turn in range(9):
            if turn == 0:
                items.append({"role": "user", "content": text()})
            else:
                items.append(
                    {"role": "tool", "tool_call_id": f"call_{turn - 1}", "content": text()}
                )
            calls = (
                [{"id": f"call_{turn}", "name": "get_weather",
                  "arguments": json.dumps({"city": rng.choice(WORDS), "unit": "C"})}]
                if turn < 8 else []
            )  # fmt: skip
            items.append(
                make_choice(
                    text(),
                    tool_calls=calls,
                    token_ids=[rng.randrange(150_000) for _ in range(TOKENS_PER_CHOICE)],
                    logprobs=[-rng.expovariate(2.0) for _ in range(TOKENS_PER_CHOICE)],
                )
            )
        items.append({"role": "user", "content": text()})
        return Trajectory(
            messages_and_choices=items,
            tools=[WEATHER_TOOL],
            reward=rng.random(),
            metrics={"correct": rng.random() < 0.5, "turns": 9, "latency_s": rng.random() * 5},
            metadata={"scenario": f"weather-{number // GROUP_SIZE}", "seed": number},
        )

    gc.disable()
    try:
        return [
            TrajectoryGroup(
                [trajectory(g * GROUP_SIZE + t) for t in range(GROUP_SIZE)],
                metadata={"scenario_id": f"weather-{g}"},
            )
            for g in range(GROUPS)
        ]
    finally:
        gc.enable()
        gc.collect()


def _trajectories(groups: list[TrajectoryGroup]) -> list[Trajectory]:
    return [t for g in groups for t in g.trajectories]


def floor(groups: list[TrajectoryGroup], path: Path, *, dictionary: bool = True) -> None:
    dumps = [t.model_dump_json() for t in _trajectories(groups)]
    table = pa.table({"trajectory_json": pa.array(dumps, pa.large_string())})
    pq.write_table(table, path, compression="zstd", use_dictionary=dictionary)


def naive(groups: list[TrajectoryGroup], path: Path) -> None:
    rows = [{"trajectory_json": json.dumps(t.model_dump())} for t in _trajectories(groups)]
    pq.write_table(pa.Table.from_pylist(rows), path, compression="zstd")


class Logger:
    """A fresh model per call (a fresh history, the first write at its step)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.calls = 0

    def model(self) -> arthex.Model:
        self.calls += 1
        return arthex.Model(
            name=f"bench-{self.calls}", project="logging", base_path=str(self.root),
            report_metrics=[],
        )  # fmt: skip

    def log(self, groups: list[TrajectoryGroup]) -> None:
        asyncio.run(self.model().log(groups, split="train", step=0))


async def _probe_gaps(work: Callable[[], Awaitable[object]]) -> list[float]:
    """Gaps (s) between wake-ups of a task sleeping 1 ms, while `work()` runs."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(probe())
    await asyncio.sleep(0.01)
    gaps.clear()
    try:
        await work()
    finally:
        done.set()
        await task
    return gaps


def _rss_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_rss_delta(run: Callable[[], object]) -> int | None:
    """Bytes the resident set grew to above where it was, while `run` ran (Linux only)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
            clear.write("5")  # reset VmHWM to the current resident set
        before = _rss_kib("VmRSS")
        run()
        return (_rss_kib("VmHWM") - before) * 1024
    except OSError:
        return None


def run() -> tuple[list[list[object]], list[list[object]]]:
    groups = build_batch()
    serialized = sum(len(t.model_dump_json().encode()) for t in _trajectories(groups))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        logger = Logger(root / "art")
        logger.log(groups[:1])  # imports and first-use setup are not the batch's memory
        memory = peak_rss_delta(lambda: logger.log(groups))
        times = {
            "floor (pyarrow defaults)": best_of_fresh(lambda: floor(groups, root / "f.parquet")),
            "floor (no dictionary)": best_of_fresh(
                lambda: floor(groups, root / "g.parquet", dictionary=False)
            ),
            "naive": best_of_fresh(lambda: naive(groups, root / "n.parquet")),
            "arthex model.log": best_of_fresh(lambda: logger.log(groups)),
        }
        model = logger.model()
        gaps = asyncio.run(_probe_gaps(lambda: model.log(groups, split="train", step=0)))

        async def blocking() -> None:
            naive(groups, root / "n.parquet")

        blocked = asyncio.run(_probe_gaps(blocking))
        part = next((root / "art").rglob("0000.parquet"))
        sizes = {
            "floor (pyarrow defaults)": (root / "f.parquet").stat().st_size,
            "floor (no dictionary)": (root / "g.parquet").stat().st_size,
            "naive": (root / "n.parquet").stat().st_size,
            "arthex model.log": part.stat().st_size,
        }
    arthex_s = times["arthex model.log"]
    rows: list[list[object]] = [
        [name, seconds, seconds / arthex_s, f"{sizes[name] / 1e6:.1f}"]
        for name, seconds in times.items()
    ]
    gaps.sort()
    targets: list[list[object]] = [
        [
            "model.log / floor (pyarrow defaults)",
            arthex_s / times["floor (pyarrow defaults)"],
            "<= 1.5",
        ],
        ["model.log / floor (no dictionary)", arthex_s / times["floor (no dictionary)"], "<= 1.5"],
        ["naive / model.log", times["naive"] / arthex_s, ">= 2"],
        [
            "peak RSS growth of model.log / serialized batch "
            f"({(memory or 0) / 1e6:.0f} MB / {serialized / 1e6:.0f} MB)",
            (memory / serialized) if memory is not None else "n/a (no /proc)",
            "< 3",
        ],
        [
            "event loop during model.log: longest gap of a 1 ms ticker (ms; "
            f"median {statistics.median(gaps) * 1e3:.1f}, p99 "
            f"{gaps[int(len(gaps) * 0.99)] * 1e3:.1f}, {len(gaps)} ticks)",
            gaps[-1] * 1e3,
            "not blocked",
        ],
        [
            "for scale: longest gap while the naive writer runs on the loop (ms)",
            max(blocked) * 1e3,
            "(blocked)",
        ],
    ]
    return rows, targets


def best_of_fresh(call: Callable[[], object]) -> float:
    """Best of REPEATS, with a collection before each so one run's garbage is not the next
    run's cost."""
    best = float("inf")
    for _ in range(REPEATS):
        gc.collect()
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    rows, targets = run()
    print_table(
        f"Logging: {GROUPS * GROUP_SIZE:,} trajectories in groups of {GROUP_SIZE}, "
        "20 messages of ~400 chars, tools and logprobs (best of 3)",
        ["writer", "wall (s)", "x arthex", "file (MB)"],
        rows,
    )
    print_table("Logging targets", ["ratio", "measured", "target"], targets)


if __name__ == "__main__":
    main()
