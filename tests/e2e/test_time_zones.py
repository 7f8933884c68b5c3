"""`recorded_at` under a time zone other than UTC: ART writes naive local times
(`datetime.now().isoformat()`), arthex writes UTC with its offset, and both must land at the
same instant. Each check runs in a subprocess with `TZ` set, as a user's machine would be.

Worked example: Asia/Kolkata is UTC+05:30 all year (no daylight saving), so ART's naive
`2024-05-01T17:30:00` written there is 12:00 UTC. America/Los_Angeles is UTC-07:00 on that
date (daylight saving), so its naive `05:00:00` is also 12:00 UTC.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from arthex.core.metrics import MetricsRow

pytestmark = pytest.mark.e2e

ZONES = {  # zone: ART's naive wall time for 12:00 UTC, arthex's row (12:30 UTC) on that wall
    "Asia/Kolkata": ("2024-05-01T17:30:00", "2024-05-01 18:00"),
    "America/Los_Angeles": ("2024-05-01T05:00:00", "2024-05-01 05:30"),
}


def run_under(zone: str, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "TZ": zone, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=environment, timeout=120
    )


def ledger(base: Path, art_wall_time: str) -> Path:
    """A history with ART's row (naive local time, as ART's `_log_metrics` writes it) and a
    later arthex row (UTC with its offset)."""
    model = base / "proj" / "models" / "agent"
    model.mkdir(parents=True)
    art_row = {"val/reward": 0.25, "training_step": 1, "step": 1, "recorded_at": art_wall_time}
    arthex_row = MetricsRow(
        step=2, values={"val/reward": 0.75}, recorded_at=datetime(2024, 5, 1, 12, 30, tzinfo=UTC)
    )
    lines = [json.dumps(art_row), json.dumps(arthex_row.to_json())]
    (model / "history.jsonl").write_text("\n".join(lines) + "\n")
    return model


@pytest.mark.parametrize("zone", sorted(ZONES))
def test_load_history_reads_art_naive_times_as_local_time(tmp_path: Path, zone: str) -> None:
    model = ledger(tmp_path, ZONES[zone][0])
    script = (
        "import sys, arthex\n"
        "frame = arthex.load_history(sys.argv[1])\n"
        "print('\\n'.join(v.isoformat() for v in frame['recorded_at'].to_list()))\n"
    )
    result = run_under(zone, "-c", script, str(model))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2024-05-01T12:00:00+00:00", "2024-05-01T12:30:00+00:00"]


@pytest.mark.parametrize("zone", sorted(ZONES))
def test_runs_and_history_show_the_local_wall_time_of_the_latest_row(
    tmp_path: Path, zone: str
) -> None:
    art_wall_time, latest_wall_time = ZONES[zone]
    ledger(tmp_path, art_wall_time)
    runs = run_under(zone, "-m", "arthex.apps.cli", "runs", "--base-path", str(tmp_path))
    assert runs.returncode == 0, runs.stderr
    (row,) = [line for line in runs.stdout.splitlines() if "agent" in line]
    assert latest_wall_time in row
    history = run_under(
        zone, "-m", "arthex.apps.cli", "history", "proj/agent", "--base-path", str(tmp_path),
        "--keys", "recorded_at",
    )  # fmt: skip
    assert history.returncode == 0, history.stderr
    assert art_wall_time.replace("T", " ") in history.stdout  # ART's row, as ART wrote it
    assert f"{latest_wall_time}:00" in history.stdout


def test_arthex_writes_timezone_aware_times() -> None:
    row = MetricsRow(step=0, values={"train/reward": 1.0})
    written = datetime.fromisoformat(row.to_json()["recorded_at"])
    assert written.utcoffset() == timedelta(0)
