"""ART's own history readers on a ledger where a batch was retired (an update that never
saved its checkpoint, resumed): the marker row and the batch-row key are plain numeric JSON,
so ART's `delete_checkpoints` reader (`polars.read_ndjson`) and its aggregate loader's
timestamps read the file as they read any other."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

from tests.faults.test_untrained_batch_rows import run_with_a_failed_save

from .art_env import art_environment, art_python

READ = textwrap.dedent(
    """
    import json, sys
    import polars as pl
    from art.utils.benchmarking.aggregate_trajectories import _load_history_timestamps

    root, ledger = sys.argv[1], sys.argv[2]
    frame = pl.read_ndjson(ledger)
    best = frame.filter(pl.col("train/reward").is_not_null())
    print(json.dumps({
        "height": frame.height,
        "steps": sorted(set(frame["step"].to_list())),
        "timestamps": sorted(row["step"] for row in _load_history_timestamps("p", None, root)),
        "train_reward_steps": best["step"].to_list(),
    }))
    """
)


def test_arts_readers_read_a_ledger_with_a_retired_batch(tmp_path: Path) -> None:
    run_with_a_failed_save(tmp_path)
    ledger = tmp_path / "p" / "models" / "m" / "history.jsonl"
    lines = ledger.read_text().splitlines()
    done = subprocess.run(
        [str(art_python()), "-c", READ, str(tmp_path), str(ledger)],
        capture_output=True, text=True, env=art_environment(), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["height"] == len(lines)
    assert seen["steps"] == [0, 1, 2] and seen["timestamps"] == [0, 1, 2]
    # ART sees every batch row (it knows no marker): both attempts at step 1
    assert seen["train_reward_steps"] == [0, 1, 1]
