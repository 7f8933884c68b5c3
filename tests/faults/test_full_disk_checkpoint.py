"""A full disk at a LocalBackend checkpoint (weights, optimizer, state), on a small tmpfs.

The issue's run, in one process: the tiny model trains on a run directory on a small disk.
Before the fix the save failed mid-write with safetensors' raw `SafetensorError ... (os error
28)`; now the backend refuses before the update (free space against the newest checkpoint's
size), in one line naming the checkpoint folder, the bytes and what to free; a save that fails
anyway says the same and leaves no folder a reader would load; after space is freed the same
script trains on from the step it stopped at, the lost batch retired in the ledger.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")

import torch

import arthex
from arthex.adapters.files import disk_use
from arthex.adapters.local import LocalBackend, checkpoint_io, checkpoints
from arthex.core.errors import DiskFullError
from arthex.core.training_row import SUPERSEDED_KEY
from arthex.testing.builders import synthetic_groups
from arthex.testing.tiny_model import tiny_model
from tests.faults._tiny_disk import fill, free_up, tiny_disk

pytestmark = pytest.mark.faults


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with tiny_disk(tmp_path / "disk", 48) as mounted:
        yield mounted


def write_tensors(size: int) -> object:
    tensors = {"w": torch.arange(size // 4, dtype=torch.float32)}

    def write(temp: Path) -> None:
        checkpoint_io.save_weights(tensors, temp / checkpoints.WEIGHTS_FILE)

    return write


def test_a_weights_file_that_does_not_fit(disk: Path) -> None:
    run_dir = disk / "run"
    checkpoints.publish(run_dir, 0, write_tensors(1 << 20), {})  # type: ignore[arg-type]
    size = disk_use(checkpoints.step_dir(run_dir, 0))
    fill(disk, leave=256 * 1024)
    with pytest.raises(DiskFullError) as caught:  # was safetensors' SafetensorError
        checkpoints.publish(run_dir, 1, write_tensors(1 << 20), {})  # type: ignore[arg-type]
    text = str(caught.value)
    assert "\n" not in text and str(checkpoints.step_dir(run_dir, 1)) in text
    assert f"({size} bytes)" in text and "arthex prune" in text
    # no temp folder, no step 1: nothing a reader could load
    assert sorted(p.name for p in checkpoints.checkpoints_dir(run_dir).iterdir()) == ["0000"]
    with pytest.raises(DiskFullError) as early:
        checkpoints.check_room(run_dir, 1)
    assert str(checkpoints.step_dir(run_dir, 1)) in str(early.value)
    free_up(disk)
    checkpoints.check_room(run_dir, 1)
    checkpoints.publish(run_dir, 1, write_tensors(1 << 20), {})  # type: ignore[arg-type]
    assert checkpoints.complete_steps(run_dir) == [0, 1]


def test_the_training_run_is_refused_before_its_update_and_resumes(
    disk: Path, tmp_path: Path
) -> None:
    base_model = tiny_model(tmp_path / "tiny")
    base_path = disk / "runs"

    async def go() -> None:
        model = arthex.TrainableModel(
            name="m", project="p", base_model=base_model, base_path=str(base_path),
            report_metrics=[],
        )  # fmt: skip
        backend = LocalBackend(engine="torch", full_finetune=True, seed=0)
        await model.register(backend)
        assert (await model.train(synthetic_groups())).step == 1
        model_dir = base_path / "p" / "models" / "m"
        size = disk_use(checkpoints.step_dir(model_dir, 1))
        weights_1 = {k: v.clone() for k, v in backend.training_tensors(model.run)[0].items()}
        fill(disk, leave=size // 2)  # room for rows and parts, not for a checkpoint
        with pytest.raises(DiskFullError) as caught:
            await model.train(synthetic_groups(offset=3))
        text = str(caught.value)
        assert "\n" not in text and str(checkpoints.step_dir(model_dir, 2)) in text
        assert "the run stays at step 1" in text
        assert checkpoints.complete_steps(model_dir) == [0, 1]
        assert not [p for p in checkpoints.checkpoints_dir(model_dir).iterdir() if p.name[0] == "."]
        # refused before any optimizer step: the live weights are step 1's
        live = backend.training_tensors(model.run)[0]
        assert all(torch.equal(live[k], v) for k, v in weights_1.items())
        await backend.close()
        await model.close()

        free_up(disk)
        again = arthex.TrainableModel(
            name="m", project="p", base_model=base_model, base_path=str(base_path),
            report_metrics=[],
        )  # fmt: skip
        backend = LocalBackend(engine="torch", full_finetune=True, seed=0)
        await again.register(backend)
        assert await again.get_step() == 1
        assert (await again.train(synthetic_groups(offset=5))).step == 2
        await backend.close()
        await again.close()

    asyncio.run(go())
    lines = [
        json.loads(line)
        for line in (base_path / "p" / "models" / "m" / "history.jsonl").read_text().splitlines()
    ]
    trained = [row["step"] for row in lines if "loss/train" in row]
    assert trained == [1, 2]  # one training row per step, none twice
    markers = [row for row in lines if SUPERSEDED_KEY in row]
    assert [(row["step"], row[SUPERSEDED_KEY]) for row in markers] == [(1, 1.0)]
