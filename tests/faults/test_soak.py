"""A 200-step soak of the tiny-model training loop on LocalBackend (`make soak`, not CI):
rollouts over HTTP, train, a val log and retention every step. Memory, open files and
checkpoint disk must not grow. It takes about 90 s on 2 cores (200 steps in 76 s, a median
step of 251 ms, under a load of 6), too long for every run; the normal run skips it.

Bounds (the loop runs in a child process, so pytest's own memory does not count):
- RSS: the mean over steps 191-200 is less than 50 MB above the mean over steps 11-30. The
  first steps are excluded: allocator pools and lazily built kernels settle there. (Each
  step loads a new served checkpoint and unloads the deleted ones; a leak of one tiny model
  per step would be about 2 MB a step, 360 MB over the window.)
- Open file descriptors: every step from 20 on within 5 of step 20's count.
- Disk: at most 2 complete checkpoint folders (latest and best) and no temp folder at the end.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")
pytest.importorskip("psutil")

from arthex.adapters.local import checkpoints as ckpt
from arthex.testing.tiny_model import tiny_model

from ._training_loop import model_dir, start_child

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.soak]

STEPS = 200
RSS_GROWTH_LIMIT = 50 * 1024 * 1024
FD_SLACK = 5
TIMEOUT_S = 300.0


def run_soak(base: Path, base_model: str) -> list[dict[str, Any]]:
    process, events_in = start_child(
        {"base_path": str(base), "base_model": base_model, "steps": STEPS, "measure": True}
    )
    steps: list[dict[str, Any]] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            if not events_in.poll(1.0):
                continue
            try:
                event = events_in.recv()
            except EOFError:
                break
            if event["event"] == "step":
                steps.append(event)
    finally:
        process.join(timeout=30)
        if process.is_alive():
            process.kill()
            process.join()
        events_in.close()
    assert process.exitcode == 0, f"the soak child failed ({process.exitcode}) at {steps[-1:]}"
    return steps


def test_200_steps_do_not_grow_memory_files_or_disk(tmp_path: Path) -> None:
    base_model = tiny_model(tmp_path / "tiny")
    base = tmp_path / "runs"
    started = time.monotonic()
    steps = run_soak(base, base_model)
    elapsed = time.monotonic() - started
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))

    rss = [s["rss"] for s in steps]
    early = statistics.mean(rss[10:30])
    late = statistics.mean(rss[-10:])
    fds = [s["fds"] for s in steps]
    reference = fds[19]
    seconds = statistics.median(s["seconds"] for s in steps)
    summary = (
        f"{STEPS} steps in {elapsed:.0f}s (median step {seconds * 1000:.0f} ms); RSS "
        f"{early / 2**20:.0f} -> {late / 2**20:.0f} MiB (max {max(rss) / 2**20:.0f}); "
        f"fds {min(fds[19:])}..{max(fds[19:])}"
    )
    print(summary)  # shown with -s
    assert late - early < RSS_GROWTH_LIMIT, summary
    assert all(abs(n - reference) <= FD_SLACK for n in fds[19:]), summary

    mdir = model_dir(base)
    kept = ckpt.complete_steps(mdir)
    assert STEPS in kept and len(kept) <= 2, kept
    entries = sorted(p.name for p in ckpt.checkpoints_dir(mdir).iterdir())
    assert entries == [f"{s:04d}" for s in kept], f"left behind: {entries}"
    # every step deleted what it no longer needed, so at most one step's folder was extra
    assert all(len(s["deleted"]) <= 2 for s in steps)
