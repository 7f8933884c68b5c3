"""`arthex prune` and `arthex runs` on runs of every kind of backend, as subprocesses: an ART
LocalBackend run (LoRA adapter folders, one left incomplete), a Tinker run (checkpoints on
the service, mapped by tinker-run.json), a run whose checkpoints live on a training server,
and a run a live trainer holds. Expected values come from the files written here."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from arthex.adapters.tinker.record import Checkpoint, RunRecord, write_record
from tests.e2e.test_cli import arthex_cli as cli
from tests.e2e.test_cli import assert_one_line_error, table_rows

pytestmark = pytest.mark.e2e

ART_VAL_REWARDS = {0: [0.3, 0.1], 1: [0.8], 2: [0.5]}  # per-step means 0.2, 0.8, 0.5
ADAPTER = {"adapter_model.safetensors": b"\0" * 2048, "adapter_config.json": b'{"r": 8}'}


def art_run(base: Path, name: str = "agent") -> Path:
    """What ART's LocalBackend leaves: naive-time history rows and adapter-only checkpoints,
    plus a step folder whose save never finished (its weights missing)."""
    model = base / "proj" / "models" / name
    start = datetime(2024, 5, 1, 12, 0)
    rows = [
        {
            "val/reward": r,
            "step": s,
            "training_step": s,
            "recorded_at": (start + timedelta(minutes=s)).isoformat(),
        }
        for s, rewards in ART_VAL_REWARDS.items()
        for r in rewards
    ]
    model.mkdir(parents=True)
    (model / "history.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    for step in ART_VAL_REWARDS:
        folder = model / "checkpoints" / f"{step:04d}"
        folder.mkdir(parents=True)
        for file, data in ADAPTER.items():
            (folder / file).write_bytes(data)
    torn = model / "checkpoints" / "0003"
    torn.mkdir()
    (torn / "adapter_config.json").write_bytes(ADAPTER["adapter_config.json"])
    return model


def listing(model: Path) -> list[str]:
    return sorted(p.name for p in (model / "checkpoints").iterdir())


def test_an_art_run_counts_only_its_complete_checkpoints(tmp_path: Path) -> None:
    model = art_run(tmp_path)
    runs = cli("runs", "--base-path", str(tmp_path))
    assert runs.returncode == 0, runs.stderr
    (row,) = table_rows(runs.stdout)
    assert row[:4] == ["proj/agent", "2", "val/reward 0.8 @ 1", "3"]

    dry = cli("prune", "--base-path", str(tmp_path))  # the only model: taken, not guessed
    assert dry.returncode == 0, dry.stderr
    assert "proj/agent: 3 checkpoint(s) and 1 incomplete folder(s), latest 2" in dry.stdout
    fates = {r[0]: (r[1], r[3]) for r in table_rows(dry.stdout)}
    assert fates == {
        "0": ("0.2", "delete"),
        "1": ("0.8", "keep (best max)"),
        "2": ("0.5", "keep (latest)"),
        "3": ("", "delete (incomplete)"),
    }
    assert listing(model) == ["0000", "0001", "0002", "0003"]

    done = cli("prune", "--base-path", str(tmp_path), "--yes")
    assert done.returncode == 0, done.stderr
    assert "deleted 2 checkpoint(s)" in done.stdout
    assert listing(model) == ["0001", "0002"], "nothing half-deleted or renamed is left"


def test_a_tinker_run_is_counted_from_its_record_and_not_pruned(tmp_path: Path) -> None:
    model = tmp_path / "proj" / "models" / "remote"
    model.mkdir(parents=True)
    row = {"train/reward": 0.5, "step": 0, "recorded_at": "2024-05-01T12:00:00+00:00"}
    (model / "history.jsonl").write_text(json.dumps(row) + "\n")
    paths = [
        Checkpoint(s, f"tinker://run-1/sampler_weights/step_{s:06d}", f"tinker://run-1/weights/{s}")
        for s in (0, 1, 2)
    ]
    state_only = Checkpoint(3, None, "tinker://run-1/weights/3")  # serves nothing: not counted
    write_record(model, RunRecord("base", 8, "run-1", 3, (*paths, state_only)))
    runs, pruned = (
        cli("runs", "--base-path", str(tmp_path)),
        cli("prune", "proj/remote", "--base-path", str(tmp_path), "--yes"),
    )
    assert runs.returncode == 0, runs.stderr
    (listed,) = table_rows(runs.stdout)
    assert listed[:4] == ["proj/remote", "3", "train/reward 0.5 @ 0", "3 (tinker)"]
    assert_one_line_error(pruned, "Tinker run", "tinker-run.json", "model.delete_checkpoints()")
    assert json.loads((model / "tinker-run.json").read_text())["checkpoints"][3]["step"] == 3
    assert not (model / "trainer.lease").exists(), "refused before taking the run's lease"


def test_a_run_without_checkpoints_here_says_where_they_may_be(tmp_path: Path) -> None:
    model = tmp_path / "proj" / "models" / "client"
    model.mkdir(parents=True)
    (model / "history.jsonl").write_text(json.dumps({"val/reward": 1.0, "step": 3}) + "\n")
    result = cli("prune", "proj/client", "--base-path", str(tmp_path))
    assert_one_line_error(result, "no complete checkpoints", "training server")


HOLD = """
import sys
from arthex.adapters.run_files.lease import FileRunLeases
from arthex.core.identity import RunRef
lease = FileRunLeases(sys.argv[1]).acquire_now(RunRef(project="proj", name="agent"))
print("held", flush=True)
sys.stdin.readline()
lease.release_now()
"""


def test_prune_deletes_nothing_while_a_live_trainer_holds_the_run(tmp_path: Path) -> None:
    model = art_run(tmp_path)
    trainer = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert trainer.stdout is not None and trainer.stdout.readline() == "held\n"
        refused = cli("prune", "proj/agent", "--base-path", str(tmp_path), "--yes")
        assert refused.returncode == 1, (refused.stdout, refused.stderr)
        assert f"pid {trainer.pid}" in refused.stderr and "one trainer per run" in refused.stderr
        assert listing(model) == ["0000", "0001", "0002", "0003"]
    finally:
        trainer.communicate("\n", timeout=60)
    done = cli("prune", "proj/agent", "--base-path", str(tmp_path), "--yes")
    assert done.returncode == 0, done.stderr
    assert listing(model) == ["0001", "0002"]
