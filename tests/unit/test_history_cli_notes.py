"""What `arthex history` says below its table: the note on an update that took no gradient step
reads right next to the row of its step (the row at N is the batch trained next, the note is
about the batch logged at N - 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from arthex.adapters.jsonl_history import encode_row
from arthex.core.metrics import MetricsRow
from tests.unit.test_cli_conventions import run


def write_history(base: Path, rows: list[MetricsRow], tail: bytes = b"") -> Path:
    folder = base / "proj" / "models" / "m"
    folder.mkdir(parents=True)
    path = folder / "history.jsonl"
    path.write_bytes(b"".join(encode_row(row) for row in rows) + tail)
    return path


def test_the_note_on_an_update_without_a_gradient_step_names_the_batch_it_trained_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flat = {"train/reward": 1.0, "train/reward_std_dev": 0.0, "data/step_num_groups_trainable": 0}
    rows = [
        MetricsRow(15, flat),  # every group of this batch had equal rewards
        MetricsRow(16, {"loss/train": 0.0, "data/step_num_gradient_steps": 0}),
        MetricsRow(16, {"train/reward": 0.4, "train/reward_std_dev": 0.0033}),
    ]
    path = write_history(tmp_path, rows)
    code, out, err = run(["history", str(path.parent)], capsys)
    assert code == 0, err
    notes = [line for line in out.splitlines() if line.startswith("step 16:")]
    assert notes == [
        "step 16: no gradient step: in the batch logged at step 15, every group's trajectories "
        "had equal rewards"
    ]
