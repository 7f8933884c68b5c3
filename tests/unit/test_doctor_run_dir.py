"""`arthex doctor`'s run-directory checks on files written by the real writers: the ledger by
JsonlHistory, the lease by FileRunLeases in another process (alive, killed, released), and
checkpoint folders in the LocalBackend's layout."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from arthex.adapters.jsonl_history import JsonlHistory, scan
from arthex.adapters.run_files.lease import lease_state
from arthex.apps.doctor import exit_code
from arthex.apps.doctor.run_dir import check_checkpoints, check_history, check_lease, gib
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow

RUN = RunRef("proj", "agent")

HOLD = """
import sys
from arthex.adapters.run_files.lease import FileRunLeases
from arthex.core.identity import RunRef
lease = FileRunLeases(sys.argv[1]).acquire_now(RunRef(project="proj", name="agent"))
print("held", flush=True)
sys.stdin.readline()
if sys.argv[2] == "release":
    lease.release_now()
"""


def run_dir(base: Path) -> Path:
    return base / RUN.project / "models" / RUN.name


def write_rows(base: Path, steps: list[int]) -> Path:
    history = JsonlHistory(str(base))

    async def report() -> None:
        for step in steps:
            await history.report(RUN, MetricsRow(step=step, values={"train/reward": 0.5}))

    asyncio.run(report())
    return history.path(RUN)


def test_scan_names_the_torn_tail_and_each_damaged_line(tmp_path: Path) -> None:
    path = write_rows(tmp_path, [0, 1, 2, 3])
    lines = path.read_bytes().split(b"\n")[:-1]
    lines[1] = b'{"step": 1, "train/rew'  # a torn line in the middle: damaged
    lines[2] = b'["not", "a row"]'
    path.write_bytes(b"\n".join(lines) + b'\n{"step": 4, "train/reward": 0.')  # torn tail
    scanned = scan(path)
    assert [row.step for row in scanned.rows] == [0, 3]
    assert scanned.torn_line == 5 and scanned.lines == 5
    assert scanned.damaged == ((2, "not valid JSON"), (3, "not a JSON object"))
    check, steps = check_history(path.parent)
    assert check.status == "fail" and steps == [0, 3]
    assert check.message.endswith(
        "2 damaged line(s): line 2 (not valid JSON), line 3 (not a JSON object); line 5 is torn"
    )


def test_a_torn_last_line_is_a_warning_and_a_clean_ledger_ok(tmp_path: Path) -> None:
    path = write_rows(tmp_path, [0, 0, 1])
    clean, steps = check_history(path.parent)
    assert (clean.status, steps) == ("ok", [0, 1])
    assert clean.message == "3 rows parse, steps 0..1"
    with path.open("ab") as file:
        file.write(b'{"step": 2, "train/re')
    torn, _ = check_history(path.parent)
    assert torn.status == "warn" and "line 4 is torn" in torn.message
    assert "history.jsonl.torn" in torn.fix
    assert exit_code([clean, torn]) == 1


def hold(base: Path, then: str) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(base), then],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def test_the_lease_held_killed_released_and_from_another_host(tmp_path: Path) -> None:
    folder = run_dir(tmp_path)
    assert lease_state(folder / "trainer.lease") == ("free", None)
    live = hold(tmp_path, "release")
    try:
        held = check_lease(folder)
        assert held.status == "ok" and f"pid {live.pid} on host" in held.message
        assert "live trainer" in held.message
    finally:
        live.communicate("\n", timeout=60)
    assert check_lease(folder).message == "no trainer holds the run"  # released: empty file

    killed = hold(tmp_path, "keep")
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(timeout=60)
    stale = check_lease(folder)
    assert stale.status == "warn" and stale.message.startswith("stale:")
    assert f"pid {killed.pid} on host {socket.gethostname()!r}" in stale.message
    text = (folder / "trainer.lease").read_text()
    assert json.loads(text)["pid"] == killed.pid, "the check took nothing over"

    (folder / "trainer.lease").write_text(
        json.dumps({"pid": 1, "host": "elsewhere-host", "started_at": "2026-01-01T00:00:00"})
    )
    other = check_lease(folder)
    assert other.status == "warn" and "host 'elsewhere-host'" in other.message
    assert "another host" in other.message
    assert f"delete {folder / 'trainer.lease'}" in other.fix


def checkpoint(folder: Path, step: int, complete: bool = True) -> None:
    path = folder / "checkpoints" / f"{step:04d}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"\0" * 100)
    if complete:
        (path / "trainer_state.json").write_text(json.dumps({"step": step}))


def test_checkpoints_for_the_newest_history_step(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    checkpoint(folder, 0)
    checkpoint(folder, 2)
    checkpoint(folder, 3, complete=False)
    ok = check_checkpoints(folder, [0, 1, 2])
    assert ok.status == "ok"
    assert ok.message == "2 complete, newest 2; incomplete folder(s) [3] (retention deletes them)"
    missing = check_checkpoints(folder, [0, 1, 2, 3, 4])
    assert missing.status == "fail"
    assert "the history names step 4 but the newest complete checkpoint is 2" in missing.message
    assert "steps 3..4 to be trained again" in missing.fix


def test_sizes_read_in_binary_units() -> None:
    assert [gib(x) for x in (512, 1536, 3 * 2**20, 1.5 * 2**30)] == [
        "512 B",
        "1.5 KiB",
        "3.0 MiB",
        "1.50 GiB",
    ]
