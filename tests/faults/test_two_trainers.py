"""Two trainer processes on one LocalBackend run: the second is refused before it writes
anything, naming the first; after the first is SIGKILLed a new trainer takes the run over and
continues at the right step."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from arthex.testing.tiny_model import tiny_model

from . import _two_trainers as child
from ._training_loop import PRELOAD

pytestmark = [pytest.mark.faults, pytest.mark.slow]


def start(options: dict[str, Any]) -> tuple[BaseProcess, Connection]:
    """A trainer forked from a forkserver that imported torch once (see _training_loop)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*PRELOAD, child.__name__])
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=child.trainer_main, args=(options, send), daemon=True)
    process.start()
    send.close()
    return process, receive


def next_event(events: Connection, process: BaseProcess) -> dict[str, Any]:
    assert events.poll(300), f"no event from pid {process.pid} (exit code {process.exitcode})"
    event: dict[str, Any] = events.recv()
    return event


def tree(root: Path) -> dict[str, str]:
    """Every file and folder under `root` with a digest of its bytes (folders: '/')."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        found[key] = "/" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def test_a_second_trainer_is_refused_and_a_new_one_takes_over_after_a_kill(
    tmp_path: Path,
) -> None:
    base_model = tiny_model(tmp_path / "tiny")
    base_path = tmp_path / "runs"
    options = {"base_model": base_model, "base_path": str(base_path), "steps": 1}
    first, first_events = start({**options, "hold": True})
    processes = [first]
    try:
        assert next_event(first_events, first)["event"] == "registered"
        trained = next_event(first_events, first)
        assert trained == {"event": "trained", "pid": first.pid, "step": 1}
        before = tree(base_path)

        second, second_events = start(options)
        processes.append(second)
        refused = next_event(second_events, second)
        second.join(60)
        assert refused["event"] == "busy"
        assert f"pid {first.pid} on host" in refused["message"]
        assert tree(base_path) == before  # nothing written, nothing removed

        assert first.pid is not None
        os.kill(first.pid, signal.SIGKILL)
        first.join(60)

        third, third_events = start(options)
        processes.append(third)
        registered = next_event(third_events, third)
        assert registered == {"event": "registered", "pid": third.pid, "step": 1}
        assert next_event(third_events, third) == {"event": "trained", "pid": third.pid, "step": 2}
        third.join(60)
        assert third.exitcode == 0
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
    run_dir = base_path / child.PROJECT / "models" / child.NAME
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["0000", "0001", "0002"]
    assert (run_dir / "trainer.lease").read_text() == ""  # the last trainer gave it back
