"""A SIGKILL before each file-system write of one training step, then the same script again.

The run is the tiny-model loop on LocalBackend (`_training_loop`), trained to step 1 once.
A counting child resumes it and trains step 2, numbering its N writes under the base path
(`_write_points`: open-for-write, rename/replace, remove, mkdir/rmdir, rmtree, fsync,
os.write); that is register's writes on resume, the rollouts' batch, the checkpoint, the
history rows, the val log and retention. For a point K, a copy of the step-1 run is resumed
by a child that kills itself just before its K-th write, and a third child resumes that and
trains to step 3. After it:

- the killed child held no lease any more; the resumed one took it over (it holds it once
  registered) and released it at exit;
- the resumed child stood at the newest complete checkpoint the kill left, with its exact
  weights and optimizer tensors;
- only complete checkpoint folders, no temp entry; the final optimizer's step counter is 3:
  one optimizer step per training step, none replayed or lost;
- the history: one `loss/train` row per step 1..3; counting what readers count (the batch
  rows a kill left untrained retired by their marker), one update batch per step 0..2;
  at most one val row per step;
- the train-split trajectories: every step 0..2 reads whole, and no step beyond.

Each of the step's three history appends is also killed halfway through its bytes: the torn
line is left out by readers and moved to `history.jsonl.torn` by the next append, and the row
is rebuilt (the training row) or logged again (the batch, the val row).

CI tries five points, chosen by what the write is, and the three torn appends; `make soak`
tries every one of the N, and the torn appends.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

from arthex.adapters.jsonl_history import JsonlHistory
from arthex.adapters.local import checkpoints as ckpt
from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.adapters.run_files.lease import lease_state
from arthex.core.training_row import is_batch_row, trained_rows
from arthex.testing.tiny_model import tiny_model

from . import _write_points
from ._training_loop import model_dir, reap, start_child
from .test_kill_resume import RUN, Attempt, check_resume, checkpoint_files

pytestmark = [pytest.mark.faults, pytest.mark.slow]

ATTEMPT_TIMEOUT_S = 60.0
SWEPT_STEP = 2  # the step whose writes are numbered (from 1)
FINAL_STEP = 3


def lease_path(base: Path) -> Path:
    return model_dir(base) / "trainer.lease"


def run_child(
    base: Path,
    base_model: str,
    dump: Path,
    *,
    lease: Path | None = None,
    preload: list[str] | None = None,
    **options: Any,
) -> Attempt:
    """One child run until it dies or ends; at its `registered` event the parent checks that
    it holds the run's lease (`lease`, the training loop's by default)."""
    options.update(base_path=str(base), base_model=base_model, dump=str(dump))
    process, events_in = start_child(options, target=_write_points.child_main, preload=preload)
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + ATTEMPT_TIMEOUT_S
    try:
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"{options} made no end in {ATTEMPT_TIMEOUT_S}s: {events[-4:]}"
            if not events_in.poll(min(left, 1.0)):
                continue
            try:
                event = events_in.recv()
            except EOFError:
                break
            events.append(event)
            if event["event"] == "registered":
                state, holder = lease_state(lease or lease_path(base))
                assert state == "held" and holder is not None, (state, holder)
                assert holder.pid == event["pid"], f"lease held by {holder}, not the child"
    finally:
        reap(process, events_in)
    registered = [e["step"] for e in events if e["event"] == "registered"]
    return Attempt(
        start=registered[0] if registered else None, events=events, exitcode=process.exitcode
    )


@pytest.fixture(scope="module")
def step_one(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[dict[str, Any]]]:
    """The run at step 1, its base model, and the writes that training step 2 from it makes."""
    root = tmp_path_factory.mktemp("every-write")
    base_model = tiny_model(root / "tiny")
    base, dump = root / "step-one", root / "dump"
    dump.mkdir()
    first = run_child(base, base_model, dump, steps=1)
    assert first.exitcode == 0, first.events[-3:]
    counted = root / "counted"
    shutil.copytree(base, counted)
    counting = run_child(counted, base_model, dump, steps=SWEPT_STEP, count=True)
    assert counting.exitcode == 0, counting.events[-3:]
    ops = [e for e in counting.events if e["event"] == "op"]
    assert [e["n"] for e in ops] == list(range(1, len(ops) + 1)) and ops
    return base, base_model, ops


def kill_and_resume(
    step_one: tuple[Path, str, list[dict[str, Any]]], point: int, where: Path, tear: bool = False
) -> str:
    """Kill before write `point` (`tear`: after half of it), resume, check. Returns what was
    killed, for the report."""
    base_at_one, base_model, _ops = step_one
    base, dump = where / "runs", where / "dump"
    shutil.copytree(base_at_one, base)
    dump.mkdir(parents=True)

    killed = run_child(base, base_model, dump, steps=SWEPT_STEP, kill_op=point, tear=tear)
    assert killed.exitcode == -signal.SIGKILL, (point, killed.exitcode, killed.events[-3:])
    said = next(e for e in killed.events if e["event"] == "self-kill")
    assert said["n"] == point and said["torn"] == tear, said
    assert lease_state(lease_path(base))[0] in ("stale", "free"), "a dead child holds the lease"
    latest = ckpt.complete_steps(model_dir(base))[-1]
    assert latest in (1, SWEPT_STEP), f"kill before {said} left latest step {latest}"
    saved = checkpoint_files(base, latest)

    resumed = run_child(base, base_model, dump, steps=FINAL_STEP)
    assert resumed.exitcode == 0, (said, resumed.exitcode, resumed.events[-3:])
    check_resume(base, dump, resumed, latest, saved)
    assert (resumed.events[-1]["event"], resumed.events[-1]["step"]) == ("done", FINAL_STEP)
    check_run(base)
    history = model_dir(base) / "history.jsonl"
    for line in history.read_bytes().splitlines():
        json.loads(line)  # every line whole: a torn one was moved aside
    assert (history.parent / "history.jsonl.torn").exists() == tear
    torn = " (torn)" if tear else ""
    return f"{point}{torn}: {said['op']} {said['path']} -> resumed at {latest}"


def check_run(base: Path) -> None:
    assert lease_state(lease_path(base))[0] == "free", "the resumed run kept its lease"
    mdir = model_dir(base)
    folders, complete = ckpt.step_folders(mdir), ckpt.complete_steps(mdir)
    assert folders == complete and complete[-1] == FINAL_STEP, (folders, complete)
    entries = [p.name for p in ckpt.checkpoints_dir(mdir).iterdir()]
    assert not [e for e in entries if e.startswith(".")], f"temp entries left: {entries}"
    optimizer = checkpoint_files(base, FINAL_STEP)["optimizer"]
    counters = {float(v) for k, v in optimizer.items() if k.endswith(".step")}
    assert counters == {float(FINAL_STEP)}, f"AdamW took {counters} steps for {FINAL_STEP}"

    rows = trained_rows(list(asyncio.run(JsonlHistory(str(base)).rows(RUN))))
    loss = Counter(r.step for r in rows if r.values.get("loss/train") is not None)
    assert loss == Counter(range(1, FINAL_STEP + 1)), f"training rows per step: {loss}"
    batches = Counter(r.step for r in rows if is_batch_row(r))
    assert batches == Counter(range(FINAL_STEP)), f"trained batches per step: {batches}"
    val = Counter(r.step for r in rows if r.values.get("val/reward") is not None)
    assert all(n == 1 for n in val.values()) and max(val) <= FINAL_STEP, val

    store = ParquetTrajectoryStore(base)
    assert asyncio.run(store.steps(RUN, "train")) == list(range(FINAL_STEP))
    for step in range(FINAL_STEP):
        groups = asyncio.run(store.read(RUN, "train", step))
        assert groups and all(len(g.trajectories) > 0 for g in groups), step


def ci_points(ops: list[dict[str, Any]]) -> dict[str, int]:
    """The five points CI tries, found by what the write is, so they stay meaningful when a
    write is added or dropped elsewhere."""

    def first(op: str, part: str, after: int = 0) -> int:
        found = [e["n"] for e in ops if e["op"] == op and part in e["path"] and e["n"] > after]
        assert found, f"no {op} of {part} among the writes: {ops}"
        return int(found[0])

    publish = first("os.rename", "checkpoints/.tmp-")
    return {
        "before the lease is taken": 1,
        "train part published, its batch row not logged": first("os.link", "trajectories/train")
        + 1,
        "batch logged, checkpoint not published": publish,
        "checkpoint published, its training row not logged": publish + 1,
        "retention renamed step 1 aside, not removed": first("os.rename", "checkpoints/0001") + 1,
    }


def appends(ops: list[dict[str, Any]]) -> list[int]:
    return [int(e["n"]) for e in ops if e["op"] == "os.write"]


def test_a_kill_before_chosen_writes_loses_nothing(
    step_one: tuple[Path, str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    ops = step_one[2]
    points = ci_points(ops)
    done = [
        f"{what}: " + kill_and_resume(step_one, p, tmp_path / f"k{p}") for what, p in points.items()
    ]
    print("\n".join([f"{len(ops)} writes:", *map(str, ops), *done]))  # shown with -s


def test_an_append_cut_in_half_by_a_kill_loses_nothing(
    step_one: tuple[Path, str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """Each history append (the batch row, the training row, the val row) written half."""
    ops = step_one[2]
    points = appends(ops)
    assert len(points) == 3, f"expected three history appends in a step: {ops}"
    done = [kill_and_resume(step_one, p, tmp_path / f"t{p}", tear=True) for p in points]
    print("\n".join(done))  # shown with -s


@pytest.mark.soak
def test_a_kill_before_every_write_loses_nothing(
    step_one: tuple[Path, str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    ops = step_one[2]
    sweep(
        ops,
        appends(ops),
        lambda point, where, tear: kill_and_resume(step_one, point, where, tear),
        tmp_path,
    )


def sweep(
    ops: list[dict[str, Any]],
    torn: list[int],
    kill: Callable[[int, Path, bool], str],
    tmp_path: Path,
) -> None:
    """Kill before every write of `ops` and halfway through each append in `torn` (`kill`
    resumes and checks one point in a folder of its own); print each outcome, fail on any."""
    started = time.monotonic()
    done: list[str] = []
    failed: list[str] = []
    tries = [(p, False) for p in range(1, len(ops) + 1)] + [(p, True) for p in torn]
    for point, tear in tries:
        where = tmp_path / f"k{point}-{tear}"
        try:
            done.append(kill(point, where, tear))
        except AssertionError as exc:
            op = ops[point - 1]
            failed.append(f"{point} ({op['op']} {op['path']}, torn {tear}): {exc}")
        shutil.rmtree(where, ignore_errors=True)
    took = time.monotonic() - started
    print("\n".join([*done, f"{len(tries)} kills, {len(failed)} failed, {took:.0f}s"]))
    assert not failed, "\n".join(failed)
