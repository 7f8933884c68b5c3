"""A restart resumes the same wandb run: two processes, one after the other, one run id.

Each process builds its own WandbReporter on the same model directory, logs offline and exits.
The proof is on disk: `wandb-run.json` is written once and reused, both offline run folders
carry that id and the resume request, and the second process reports it resumed. Each process
also lists its wandb service children before exiting, and they must be gone afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arthex.testing.wandb_offline import offline_run_dirs, read_offline_run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

pytest.importorskip("wandb")

PROJECT, NAME = "proj", "restarted"

SCRIPT = r"""
import asyncio, json, os, sys
import wandb
from arthex.adapters.wandb_reporter import WandbReporter
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow

root, first_step = sys.argv[1], int(sys.argv[2])
run = RunRef("proj", "restarted")
reporter = WandbReporter(root, mode="offline", settings={
    "x_disable_stats": True, "x_disable_machine_info": True, "disable_git": True,
    "disable_code": True, "silent": True,
})

async def main():
    await reporter.report(run, MetricsRow(step=first_step, values={"val/reward": 0.5}))
    await reporter.report(run, MetricsRow(step=first_step + 1, values={"loss/train": 2.0}))
    await reporter.close()

asyncio.run(main())

def children():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            found.append(int(pid))
    return found

service = children()
wandb.teardown()
print(json.dumps({"resumed": reporter.resumed(run), "service": service}))
"""


def run_process(root: Path, first_step: int, home: Path) -> tuple[bool, list[int]]:
    """Run one logging process; returns whether it resumed and its wandb service pids."""
    env = {
        **os.environ,
        "WANDB_SILENT": "true",
        "WANDB_CONFIG_DIR": str(home / "config"),
        "WANDB_CACHE_DIR": str(home / "cache"),
        "WANDB_DATA_DIR": str(home / "data"),
        "WANDB_ARTIFACT_DIR": str(home / "artifacts"),
    }
    env.pop("WANDB_DIR", None)
    # a service another test left in this process would be inherited (wandb children join the
    # service WANDB_SERVICE names): each logging process must start its own
    env.pop("WANDB_SERVICE", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(root), str(first_step)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return bool(result["resumed"]), [int(pid) for pid in result["service"]]


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_second_process_resumes_the_first_process_run(tmp_path: Path) -> None:
    root = tmp_path / ".art"
    record_path = root / PROJECT / "models" / NAME / "wandb-run.json"

    first_resumed, first_service = run_process(root, 0, tmp_path / "home")
    record = record_path.read_bytes()
    second_resumed, second_service = run_process(root, 1, tmp_path / "home")

    assert not first_resumed
    assert second_resumed
    assert record_path.read_bytes() == record  # reused as written, not rewritten
    run_id = json.loads(record)["run_id"]

    runs = [read_offline_run(path, wait=10) for path in offline_run_dirs(record_path.parent)]
    assert len(runs) == 2
    assert [found.run_id for found in runs] == [run_id, run_id]
    assert all(found.finished for found in runs)
    assert all(run_id in found.path.name for found in runs)
    assert all(found.resume for found in runs)  # each init asked to resume (resume="allow")
    assert [[(row.step, dict(row.values)) for row in found.rows()] for found in runs] == [
        [(0, {"val/reward": 0.5}), (1, {"loss/train": 2.0})],
        [(1, {"val/reward": 0.5}), (2, {"loss/train": 2.0})],
    ]

    services = first_service + second_service
    assert first_service, "the first process should have had a wandb service"
    assert second_service, "the second process should have had a wandb service"
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in services) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in services)
