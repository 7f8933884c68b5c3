"""The Tinker service's durability rules at their own edge (the SIGKILL end to end is
tests/e2e/test_tinker_kill.py): which answer a request id of an earlier server life gets, and
what a store opened on a state dir a killed server left does with its temp folders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tinker")

from arthex.apps.server.tinker_protocol.errors import HttpError
from arthex.apps.server.tinker_protocol.futures import Futures
from arthex.apps.server.tinker_protocol.store import RunStore
from arthex.apps.server.tinker_protocol.wire import Reply


def status_of(futures: Futures, request_id: str) -> int:
    try:
        return futures.retrieve({"request_id": request_id}).status
    except HttpError as exc:
        return exc.status


def test_a_request_of_an_earlier_life_is_gone_and_an_unknown_one_is_not_found() -> None:
    earlier, now = Futures(long_poll_s=0.0), Futures(long_poll_s=0.0)
    try:
        old = earlier.submit(lambda: Reply.json({"done": True}))
        mine = now.submit(lambda: Reply.json({"done": True}))
        assert old.split(".")[0] == earlier.boot_id != now.boot_id
        assert status_of(now, mine) == 200
        assert status_of(now, old) == 410  # the SDK raises RetryableException for a 410
        assert status_of(now, f"{now.boot_id}.{'0' * 32}") == 404  # never issued here
        assert status_of(now, "not-an-id") == 404
    finally:
        earlier.close()
        now.close()


def dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], text=True,
                           capture_output=True, check=True)  # fmt: skip
    return int(child.stdout)


def checkpoint(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter.safetensors").write_bytes(b"weights")
    (folder / "meta.json").write_text(json.dumps({"time": "2026-01-01T00:00:00+00:00"}))
    return folder


def test_a_new_store_sweeps_what_dead_processes_left_and_never_lists_it(tmp_path: Path) -> None:
    weights = tmp_path / "runs" / "run-1" / "weights"
    kept = checkpoint(weights / "s1")
    # a save killed before its rename (complete inside, as the last step leaves it), and one
    # of a process still alive (this one), which may be in use
    left = checkpoint(weights / f".tmp-s2.{dead_pid()}.0a1b2c3d")
    busy = checkpoint(weights / f".tmp-s3.{os.getpid()}.0a1b2c3d")
    stray = tmp_path / "runs" / "run-1" / f".tmp-run.json.{dead_pid()}.00ff00ff"
    stray.write_text("{")
    store = RunStore(tmp_path)
    assert kept.is_dir() and busy.is_dir()
    assert not left.exists() and not stray.exists()
    assert [c["checkpoint_id"] for c in store.checkpoints("run-1")] == ["weights/s1"]
