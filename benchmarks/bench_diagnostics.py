"""In-run diagnostics: what they add to a training step (issue: under 1% of a step's time).

Baseline: the same `model.train` with `ARTHEX_DIAGNOSTICS=0`, measured in the same run,
alternating with the diagnosed steps so a busy machine slows both alike. Diagnosed: the
default, which adds a pass over the batch (trainability, reward spread and range, truncation)
and, for a backend that serves, one `GET /v1/models` to check the step just trained is served.

Two backends: LocalBackend training the tiny model on this machine's CPU (a real step: pack,
forward, backward, checkpoint, serve), and the in-memory backend, whose "step" costs almost
nothing, so the diagnostics' own cost shows as a share of a near-empty step (the worst case).
The ratio is diagnosed / baseline, medians over the steps; below the noise of a step, so the
pass over the batch is also timed alone (best of 20) as a share of the undiagnosed step.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from typing import Any

import arthex
from arthex.core import diagnostics
from arthex.core.trajectories import TrajectoryGroup
from arthex.testing.builders import synthetic_groups
from arthex.testing.fakes import InMemoryBackend

from ._table import best_of, print_table

STEPS = 6  # per setting, alternating
LOCAL_BATCH = (8, 4)  # groups x trajectories: a small RL batch of the tiny model
MEMORY_BATCH = (64, 8)  # 512 trajectories


async def _timed_steps(
    model: arthex.TrainableModel, batches: list[list[TrajectoryGroup]]
) -> tuple[list[float], list[float]]:
    on: list[float] = []
    off: list[float] = []
    for i, batch in enumerate(batches):
        diagnosed = i % 2 == 1
        os.environ["ARTHEX_DIAGNOSTICS"] = "1" if diagnosed else "0"
        started = time.perf_counter()
        await model.train(batch, {"learning_rate": 1e-4})
        (on if diagnosed else off).append(time.perf_counter() - started)
    return on, off


def _measure(backend: Any, base_model: str, shape: tuple[int, int]) -> tuple[float, float]:
    groups, size = shape
    batches = [synthetic_groups(groups, size, offset=i) for i in range(2 * STEPS + 1)]

    async def main() -> tuple[list[float], list[float]]:
        with tempfile.TemporaryDirectory() as tmp:
            model = arthex.TrainableModel(
                name="bench", project="diag", base_model=base_model, base_path=tmp,
                report_metrics=[],
            )  # fmt: skip
            try:
                await model.register(backend)
                await model.train(batches[0], {"learning_rate": 1e-4})  # warm-up
                return await _timed_steps(model, batches[1:])
            finally:
                await model.close()
                await backend.close()

    before = os.environ.get("ARTHEX_DIAGNOSTICS")
    try:
        on, off = asyncio.run(main())
    finally:
        if before is None:
            os.environ.pop("ARTHEX_DIAGNOSTICS", None)
        else:
            os.environ["ARTHEX_DIAGNOSTICS"] = before
    return statistics.median(off), statistics.median(on)


def _pass_alone(shape: tuple[int, int]) -> float:
    """Seconds of the diagnostics' pass over one batch, without the step around it."""
    batch = synthetic_groups(*shape)

    def once() -> None:
        found = diagnostics.check_trainable(batch)
        diagnostics.RunDiagnostics().batch(batch, found)

    return best_of(20, once)


def run() -> list[list[object]]:
    rows: list[list[object]] = []
    try:
        from arthex.adapters.local import LocalBackend
        from arthex.testing.tiny_model import tiny_model
    except ImportError:  # the local extra is not installed: the in-memory row only
        pass
    else:
        with tempfile.TemporaryDirectory() as tmp:
            base = tiny_model(f"{tmp}/tiny")
            off, on = _measure(LocalBackend(engine="torch", full_finetune=True), base, LOCAL_BATCH)
        rows.append(
            [f"LocalBackend, tiny model, {LOCAL_BATCH[0]}x{LOCAL_BATCH[1]}", off * 1e3, on * 1e3,
             on / off, "<= 1.01"]
        )  # fmt: skip
        alone = _pass_alone(LOCAL_BATCH)
        rows.append(
            ["  the pass alone, as a share of that step", off * 1e3, alone * 1e3,
             alone / off, "<= 0.01"]
        )  # fmt: skip
    off, on = _measure(InMemoryBackend(), "in-memory", MEMORY_BATCH)
    rows.append(
        [f"in-memory backend, {MEMORY_BATCH[0]}x{MEMORY_BATCH[1]}", off * 1e3, on * 1e3, on / off,
         "- (near-empty step)"]
    )  # fmt: skip
    alone = _pass_alone(MEMORY_BATCH)
    rows.append(
        ["  the pass alone, as a share of that step", off * 1e3, alone * 1e3, alone / off, "-"]
    )
    return rows


def main() -> None:
    print_table(
        "In-run diagnostics: a training step with them on against off (ARTHEX_DIAGNOSTICS=0)",
        ["step", "off (ms, baseline)", "on (ms)", "ratio (on / off)", "target"],
        run(),
    )


if __name__ == "__main__":
    main()
