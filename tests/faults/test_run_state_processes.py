"""A run's state.json under several processes at once: writers merging their own keys lose
none of each other's, and a reader polling the file never sees a half-written state."""

from __future__ import annotations

import json
import multiprocessing
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path

import pytest

import arthex as art

pytestmark = [pytest.mark.faults, pytest.mark.slow]

WRITERS = 3
MERGES = 40


def model(base: str) -> art.Model:
    return art.Model(name="shared", project="faults", base_path=base, report_metrics=[])


def writer(base: str, who: int, start: Barrier) -> None:
    state = model(base)
    start.wait()
    for i in range(MERGES):
        # every merge also rewrites a shared key, so the file changes under the reader
        state.merge_state({f"writer{who}": {f"k{i}": i}, "last": {"who": who, "i": i}})


def reader(base: str, start: Barrier, stop: Event, seen: multiprocessing.Queue[int]) -> None:
    path = Path(base) / "faults" / "models" / "shared" / "state.json"
    state = model(base)
    start.wait()
    reads = 0
    while not stop.is_set():
        if path.exists():
            current = state.read_state()  # raises CorruptDataError on a torn file
            assert isinstance(current, dict)
            json.loads(path.read_text())
            reads += 1
    seen.put(reads)


def test_concurrent_merges_from_processes_keep_every_key(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(WRITERS + 1)
    stop = context.Event()
    seen: multiprocessing.Queue[int] = context.Queue()
    base = str(tmp_path)
    model(base).overwrite_state({"created": True})
    writers = [context.Process(target=writer, args=(base, w, start)) for w in range(WRITERS)]
    watcher = context.Process(target=reader, args=(base, start, stop, seen))
    for process in [*writers, watcher]:
        process.start()
    for process in writers:
        process.join(timeout=120)
        assert process.exitcode == 0
    stop.set()
    watcher.join(timeout=60)
    assert watcher.exitcode == 0, "the reader saw a state that was not whole JSON"
    assert seen.get(timeout=10) > 0
    final = model(base).read_state()
    assert final is not None and final["created"] is True
    for w in range(WRITERS):
        assert final[f"writer{w}"] == {f"k{i}": i for i in range(MERGES)}
    assert final["last"]["i"] == MERGES - 1
