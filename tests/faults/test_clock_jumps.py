"""A wall clock that jumps an hour forward or back during a run changes no decision that must
not depend on it: lease expiry, job retention, rate limits run on a monotonic clock; the
viewer's "last update" is the newest row's, not the latest stamp.

The clocks are replaced in a fresh interpreter before arthex is imported (`_clock_child`), so
the code's own reads of `time.time`, default arguments included, see the jump. Before the fix
the server's lease table and job retention ran on the wall clock: a jump forward ended a live
trainer's lease (another client could take the run mid-update) and deleted job events early;
a jump back kept a vanished client's lease and old jobs an hour longer. The rate limiter
already used the monotonic clock (kept here so it stays that way).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from arthex.adapters.jsonl_history import append_line, encode_row
from arthex.apps.view.data import Catalog, run_summary
from arthex.core.metrics import MetricsRow

pytestmark = pytest.mark.faults

CHILD = Path(__file__).with_name("_clock_child.py")


@pytest.fixture(scope="module")
def decisions() -> dict[str, bool]:
    done = subprocess.run(
        [sys.executable, str(CHILD)], capture_output=True, text=True, check=True, timeout=120
    )
    result: dict[str, bool] = json.loads(done.stdout)
    return result


def test_a_live_lease_survives_the_wall_clock_jumping_forward(decisions: dict[str, bool]) -> None:
    assert decisions["lease_forward"] is True


def test_a_lapsed_lease_ends_though_the_wall_clock_went_back(decisions: dict[str, bool]) -> None:
    assert decisions["lease_back"] is False


def test_job_retention_follows_elapsed_time_not_the_wall_clock(
    decisions: dict[str, bool],
) -> None:
    assert decisions["job_forward"] is True  # ten seconds after: kept, whatever the wall says
    assert decisions["job_back"] is False  # an hour and a second after: gone


def test_rate_limits_follow_elapsed_time(decisions: dict[str, bool]) -> None:
    assert decisions["rate_forward"] is True and decisions["rate_back"] is True


def test_the_viewers_last_update_is_the_newest_row_after_a_jump_back(tmp_path: Path) -> None:
    ledger = tmp_path / "p" / "models" / "m" / "history.jsonl"
    ledger.parent.mkdir(parents=True)
    start = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    stamps = [start, start + timedelta(minutes=1), start + timedelta(minutes=2, hours=-1)]
    for step, when in enumerate(stamps):
        append_line(ledger, encode_row(MetricsRow(step, {"val/reward": 0.5}, recorded_at=when)))
    catalog = Catalog([str(tmp_path)])
    (run,) = catalog.runs()
    summary = run_summary(catalog, run, None, "max")
    assert summary["updated"] == stamps[-1].isoformat()
    assert summary["step"] == 2
