"""An update that never reached its checkpoint: its batch was logged at step N (a train-split
row and a trajectory part), then saving step N+1 failed (a full disk). The script is run again
and trains step N on a new batch. Before the fix the ledger held two train-split rows at N, both
averaged by every reader; now the first is retired by a marker row, readers and mirrors see only
the batch that trained, and the file stays plain JSON lines that ART's readers take."""

from __future__ import annotations

import asyncio
import errno
import json
import statistics
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import arthex
from arthex.adapters.jsonl_history import read_rows
from arthex.core.config import TrainConfig
from arthex.core.history_index import HistoryIndex
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow
from arthex.core.retention import BestStep
from arthex.core.training_row import SUPERSEDED_KEY, trained_rows
from arthex.core.trajectories import TrajectoryGroup
from arthex.testing.builders import make_group
from arthex.testing.fakes.backend import InMemoryBackend

RUN = RunRef("p", "m")


class SaveFailsOnce(InMemoryBackend):
    """The in-memory backend, whose next update fails as a checkpoint save on a full disk does:
    after the batch was logged, before the step advanced."""

    fail_next = False

    async def train_steps(
        self, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        if self.fail_next:
            self.fail_next = False
            raise OSError(errno.ENOSPC, "No space left on device", "checkpoints/0002")
        async for sample in super().train_steps(run, groups, config):
            yield sample


class Mirror:
    def __init__(self) -> None:
        self.rows: list[MetricsRow] = []

    async def report(self, run: RunRef, row: MetricsRow) -> None:
        self.rows.append(row)

    async def close(self) -> None:
        pass


def batch(rewards: Sequence[float]) -> list[TrajectoryGroup]:
    return [make_group((reward, reward + 1.0)) for reward in rewards]


def mean_reward(groups: Sequence[TrajectoryGroup]) -> float:
    return statistics.mean(t.reward for g in groups for t in g.trajectories)


FIRST, LOST, RESUMED = batch([0.0, 0.5]), batch([10.0, 20.0]), batch([2.0, 3.0])


def run_with_a_failed_save(base: Path) -> tuple[Mirror, Mirror]:
    backend = SaveFailsOnce()
    before, after = Mirror(), Mirror()

    async def go() -> None:
        model = arthex.TrainableModel(
            name="m", project="p", base_model="tiny", base_path=str(base), mirrors=[before]
        )
        await model.register(backend)
        await model.train(FIRST)
        backend.fail_next = True
        with pytest.raises(OSError):
            await model.train(LOST)
        await model.close()
        # the script, run again once space was freed: another process, the same run
        again = arthex.TrainableModel(
            name="m", project="p", base_model="tiny", base_path=str(base), mirrors=[after]
        )
        await again.register(backend)
        assert await again.get_step() == 1
        await again.train(RESUMED)
        assert await again.get_step() == 2
        await again.close()

    asyncio.run(go())
    return before, after


def ledger(base: Path) -> Path:
    return base / "p" / "models" / "m" / "history.jsonl"


def train_rewards(rows: Sequence[Mapping[str, Any] | MetricsRow], step: int) -> list[float]:
    """The `train/reward` of each row at `step`, in order (file lines or rows read)."""
    found = []
    for row in rows:
        at, values = (row.step, row.values) if isinstance(row, MetricsRow) else (row["step"], row)
        reward = values.get("train/reward")
        if at == step and reward is not None:
            found.append(reward)
    return found


def test_a_resumed_update_retires_the_rows_of_the_update_that_never_saved(tmp_path: Path) -> None:
    before, after = run_with_a_failed_save(tmp_path)
    lines = [json.loads(line) for line in ledger(tmp_path).read_text().splitlines()]
    # the file keeps what happened: both batches, the marker between them
    assert train_rewards(lines, 1) == [mean_reward(LOST), mean_reward(RESUMED)]
    markers = [row for row in lines if SUPERSEDED_KEY in row]
    assert [(row["step"], row[SUPERSEDED_KEY]) for row in markers] == [(1, 1)]
    at_1 = [i for i, row in enumerate(lines) if row["step"] == 1 and "train/reward" in row]
    assert at_1[0] < lines.index(markers[0]) < at_1[1]

    # readers see only the batch that trained
    assert train_rewards(read_rows(ledger(tmp_path)), 1) == [mean_reward(RESUMED)]
    assert train_rewards(read_rows(ledger(tmp_path)), 0) == [mean_reward(FIRST)]

    # running totals count trajectories that were part of a trained batch only
    resumed_row = next(r for r in lines if r.get("train/reward") == mean_reward(RESUMED))
    trajectories = sum(len(g.trajectories) for g in (*FIRST, *RESUMED))
    assert resumed_row["data/cum/num_trajectories"] == trajectories

    # a mirror never received the lost batch: it went there only once its update trained
    mirrored = [*before.rows, *after.rows]
    assert mean_reward(LOST) not in train_rewards(mirrored, 1)
    assert train_rewards(mirrored, 1) == [mean_reward(RESUMED)]


def test_art_style_readers_still_read_the_ledger(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    run_with_a_failed_save(tmp_path)
    frame = pl.read_ndjson(ledger(tmp_path))  # how ART's delete_checkpoints reads it
    assert frame.height == len(ledger(tmp_path).read_text().splitlines())
    assert set(frame["step"].to_list()) == {0, 1, 2}


def test_the_index_takes_retired_rows_out_of_means_totals_and_best_steps() -> None:
    def row(step: int, **values: float) -> MetricsRow:
        return MetricsRow(step=step, values={k.replace("__", "/"): v for k, v in values.items()})

    batch = {"data__update_batch": 1.0}
    rows = [
        row(0, train__reward=1.0, data__step_num_trajectories=4.0, **batch),
        row(1, train__reward=9.0, data__step_num_trajectories=4.0, **batch),  # never trained
        row(1, val__reward=5.0),  # an evaluator's row: never retired
        row(1, **{"data__superseded_train_rows": 1.0}),
        row(1, train__reward=3.0, data__step_num_trajectories=2.0, **batch),
    ]
    best = BestStep("max")
    index = HistoryIndex(rows[:2])
    index.subscribe("train/reward", best)
    assert best.step == 1 and index.untrained_batches(1) == 1
    index.catch_up(rows[2:4], 0)
    # retired: step 1 has no reward at all now, so the best is back at step 0
    assert index.step_means("train/reward") == {0: 1.0}
    assert best.step == 0 and index.untrained_batches(1) == 0
    assert index.step_means("val/reward") == {1: 5.0}
    index.catch_up(rows[4:], 0)
    assert index.step_means("train/reward") == {0: 1.0, 1: 3.0}
    assert index.total("data/step_num_trajectories") == 6.0
    assert best.step == 1
    kept = trained_rows(rows)
    assert [r.values.get("train/reward") for r in kept] == [1.0, None, None, 3.0]
    assert kept[1].values == {"val/reward": 5.0}


def test_a_train_split_row_another_writer_logged_is_never_retired(tmp_path: Path) -> None:
    async def go() -> None:
        model = arthex.TrainableModel(
            name="m", project="p", base_model="tiny", base_path=str(tmp_path)
        )
        await model.register(InMemoryBackend())
        await model.train(FIRST)
        outside = arthex.Model(name="m", project="p", base_path=str(tmp_path))
        await outside.log(LOST, split="train", step=1)  # not an update's batch
        await model.train(RESUMED)
        await model.close()

    asyncio.run(go())
    rows = read_rows(ledger(tmp_path))
    assert train_rewards(rows, 1) == [mean_reward(LOST), mean_reward(RESUMED)]
    assert not any(SUPERSEDED_KEY in row.values for row in rows)
