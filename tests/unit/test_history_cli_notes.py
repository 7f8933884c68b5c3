"""What `arthex history` says below and beside its table: a torn last line of history.jsonl is
named once (not dropped silently), and the note on an update that took no gradient step reads
right next to the row of its step (the row at N is the batch trained next, the note is about
the batch logged at N - 1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from arthex.adapters.jsonl_history import encode_row
from arthex.core.metrics import MetricsRow
from tests.unit.test_cli_conventions import run

ROWS = 12


def write_history(base: Path, rows: list[MetricsRow], tail: bytes = b"") -> Path:
    folder = base / "proj" / "models" / "m"
    folder.mkdir(parents=True)
    path = folder / "history.jsonl"
    path.write_bytes(b"".join(encode_row(row) for row in rows) + tail)
    return path


def test_a_torn_last_line_is_named_once_with_its_file_and_line(tmp_path: Path) -> None:
    rows = [MetricsRow(step, {"train/reward": step / 10}) for step in range(ROWS - 1)]
    torn = encode_row(MetricsRow(ROWS - 1, {"train/reward": 0.5}))[:-9]  # cut mid-line
    path = write_history(tmp_path, rows, torn)
    assert path.read_bytes().count(b"\n") == ROWS - 1  # 12 lines, the last without its end
    # as a user runs it: its own process, the warning on stderr as Python prints it
    done = subprocess.run(
        [sys.executable, "-m", "arthex.apps.cli", "history", str(path.parent), "-n", "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"the last 3 of {ROWS - 1} steps" in done.stdout
    warnings = [line for line in done.stderr.splitlines() if not line.startswith("see it live")]
    assert warnings == [  # once, besides the one line pointing at `arthex view`
        f"{path}: line {ROWS} is torn (a write cut short) and is left out; the next append "
        "moves it to history.jsonl.torn"
    ]


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
    assert notes == ["step 16: no gradient step: each group of step 15's batch had equal rewards"]


def test_one_row_per_step_and_the_count_in_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run of 13 steps as a training loop logs it (30 lines: each step's train batch, the
    training metrics of the update that made it, and an evaluation every fourth step), and an
    evaluation repeated at step 12."""
    rows: list[MetricsRow] = []
    for step in range(13):
        if step:
            rows.append(MetricsRow(step, {"loss/train": -step / 100, "loss/grad_norm": 1.0}))
        rows.append(MetricsRow(step, {"train/reward": step / 20}))
        if step % 4 == 0:
            rows.append(MetricsRow(step, {"val/reward": step / 10}))
    rows.append(MetricsRow(12, {"val/reward": 0.9}))  # the same split again at step 12
    path = write_history(tmp_path, rows)
    assert path.read_bytes().count(b"\n") == 30
    keys = ["train/reward", "val/reward", "loss/train"]
    code, out, err = run(["history", str(path.parent), "-n", "5", "-k", ",".join(keys)], capsys)
    assert code == 0, err
    assert "proj/m: the last 5 of 14 rows (one per step and split)" in out
    table = [
        [cell.strip() for cell in line.strip("│").split("│")]
        for line in out.splitlines()
        if line.startswith("│")
    ]
    assert table == [
        ["9", "0.45", "", "-0.09"],
        ["10", "0.5", "", "-0.1"],
        ["11", "0.55", "", "-0.11"],
        ["12", "0.6", "1.2", "-0.12"],
        ["12", "", "0.9", ""],
    ]
    code, out, err = run(["history", str(path.parent), "-n", "3", "-k", "train/reward"], capsys)
    assert "proj/m: the last 3 of 13 steps" in out
    code, out, err = run(["history", str(path.parent), "-n", "50", "-k", "loss/*"], capsys)
    assert "proj/m: all 12 steps" in out
