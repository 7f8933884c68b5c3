"""ART's `art.utils.sft` on arthex's SFT path: `train_sft_from_file` trains the batches of a
JSONL file it selects at their slice of one schedule, in one `model.train_sft` step. (The
iterators themselves are compared with ART's in tests/interop/test_art_frontend.py.)"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from arthex.art.utils.sft import (
    create_sft_dataset_iterator,
    get_file_row_count,
    iterate_file,
    train_sft_from_file,
)
from arthex.core.model import ModelPorts
from arthex.core.trainable import TrainableModel
from arthex.core.trajectories import Trajectory
from arthex.testing.fakes.backend import InMemoryBackend
from arthex.testing.fakes.history import InMemoryHistory
from arthex.testing.fakes.stores import InMemoryTrajectoryStore


def write_rows(path: Path, count: int) -> None:
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"q{i}"},
                {"role": "assistant", "content": f"answer {i}"},
            ]
        }
        for i in range(count)
    ]
    path.write_text("".join(json.dumps(row) + "\n\n" for row in rows))


def test_a_file_trains_its_selected_batches_at_their_scheduled_rates(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    write_rows(path, 5)
    assert get_file_row_count(str(path)) == 5
    history = InMemoryHistory()
    model = TrainableModel(
        name="m",
        project="p",
        base_model="fake",
        ports=ModelPorts(store=InMemoryTrajectoryStore(), reporter=history),
    )

    async def main() -> None:
        await model.register(InMemoryBackend())
        # 2 epochs of 5 rows in batches of 2: 5 batches, 1 of warmup, then linear to 0:
        # 1e-3, 1e-3, 2/3e-3, 1/3e-3, 0. Batches 1..3 are trained.
        await train_sft_from_file(
            model,
            str(path),
            epochs=2,
            batch_size=2,
            peak_lr=1e-3,
            warmup_ratio=0.2,
            initial_step=1,
            final_step=4,
        )

    asyncio.run(main())
    rows = asyncio.run(history.rows(model.run))
    rates = [
        row.values["sft/loss/learning_rate"] for row in rows if "sft/gradient_step" in row.values
    ]
    assert rates == pytest.approx([1e-3, 2e-3 / 3, 1e-3 / 3])
    assert {row.step for row in rows} == {1}  # one step of the run


def test_nothing_to_train_on_does_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    asyncio.run(train_sft_from_file(None, str(empty)))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Only JSONL files"):
        asyncio.run(train_sft_from_file(None, str(tmp_path / "data.csv")))  # type: ignore[arg-type]


def test_the_stream_is_every_row_each_epoch_and_skips_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    write_rows(path, 7)
    said = [
        str(t.messages()[0]["content"])
        for t in iterate_file(str(path), epochs=2, shuffle_buffer_size=3)
    ]
    assert sorted(said[:7]) == sorted(said[7:]) == [f"q{i}" for i in range(7)]
    skipped = [
        str(t.messages()[0]["content"])
        for t in iterate_file(str(path), epochs=2, shuffle_buffer_size=3, initial_skip=4)
    ]
    assert skipped == said[4:]


def test_chunks_cover_the_data_in_order_with_one_schedule() -> None:
    items = [Trajectory(reward=float(i)) for i in range(5)]
    chunks = list(
        create_sft_dataset_iterator(
            items,
            chunk_size=2,
            batch_size=2,
            peak_lr=1.0,
            warmup_ratio=0.0,
            shuffle=False,
            show_progress=False,
        )
    )
    assert [[t.reward for t in c.trajectories] for c in chunks] == [[0, 1, 2, 3], [4]]
    assert [c.config.learning_rate for c in chunks] == [(1.0, 0.5), (0.0,)]
    assert [c.step for c in chunks] == [0, 2]
