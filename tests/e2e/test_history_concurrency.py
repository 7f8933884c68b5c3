"""Several processes appending to one history.jsonl: every row whole, each writer's order kept."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arthex.adapters.jsonl_history import JsonlHistory
from arthex.core.identity import RunRef

WRITERS = 8
ROWS_EACH = 500
RUN = RunRef("proj", "shared")

# Each writer pads its rows to its own length (up to ~8 KiB, past any pipe-size atomicity a
# plain write would get by luck), so a line mixing two writers cannot parse as either's row.
WRITER = """
import asyncio, os, sys, time
from arthex.adapters.jsonl_history import JsonlHistory
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow

root, go, ready = sys.argv[1], sys.argv[4], sys.argv[5]
writer, count = int(sys.argv[2]), int(sys.argv[3])
pad = "pad/" + "x" * (1 + writer * 1000)

async def main() -> None:
    history = JsonlHistory(root)
    run = RunRef("proj", "shared")
    for seq in range(count):
        values = {"writer": float(writer), "seq": float(seq), pad: float(writer)}
        await history.report(run, MetricsRow(step=seq % 7, values=values))
    await history.close()

open(ready, "w").close()  # this writer is up; the parent starts everyone at once
while not os.path.exists(go):
    time.sleep(0.001)
asyncio.run(main())
"""


@pytest.mark.e2e
@pytest.mark.faults
def test_concurrent_writers_never_interleave_or_lose_rows(tmp_path: Path) -> None:
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{w}" for w in range(WRITERS)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WRITER,
                str(tmp_path),
                str(w),
                str(ROWS_EACH),
                str(go),
                str(ready[w]),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for w in range(WRITERS)
    ]
    try:
        # A barrier, not a sleep: start the appends only once every writer is up, so they
        # overlap however slowly the interpreters start.
        while not all(flag.exists() for flag in ready):
            assert all(proc.poll() is None for proc in procs), "a writer died while starting"
            time.sleep(0.01)
        go.touch()
        for proc in procs:
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err.decode()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    history = JsonlHistory(str(tmp_path))
    path = history.path(RUN)
    assert path.read_bytes().count(b"\n") == WRITERS * ROWS_EACH
    assert not path.with_name("history.jsonl.torn").exists()

    rows = asyncio.run(history.rows(RUN))
    assert len(rows) == WRITERS * ROWS_EACH
    seqs: dict[int, list[float]] = {w: [] for w in range(WRITERS)}
    for row in rows:
        writer = int(row.values["writer"] or 0)
        pad = "pad/" + "x" * (1 + writer * 1000)
        assert dict(row.values) == {
            "writer": float(writer),
            "seq": row.values["seq"],
            pad: float(writer),
        }
        seqs[writer].append(row.values["seq"] or 0.0)
    for writer, got in seqs.items():
        assert got == [float(i) for i in range(ROWS_EACH)], writer
