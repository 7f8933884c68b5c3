"""Kill and resume a real training run: the tiny-model loop on LocalBackend (rollouts over
HTTP, train, val log, retention) is SIGKILLed 9 times, at chosen and at random points, and
restarted each time.

What "nothing lost" means here, checked after every kill and every restart:

- The step: a restarted run continues from the newest complete checkpoint folder, and its
  live weights and optimizer tensors are bitwise the ones in that folder (AdamW's own step
  counter equals the step: one optimizer step per training step, none lost or replayed).
- Training rows (`loss/train`, written at step s by the train call that produced s): at most
  one per step, never one for a step that has no checkpoint. The row is appended after the
  backend's checkpoint is durable, so a kill in between leaves checkpoint s without its row:
  that gap is allowed only at the step the killed process had just written, and the restart
  rebuilds it from the metrics kept in the checkpoint (no duplicate). Every other step
  1..latest has exactly one row, and at the end every step has its row.
- Train-split rows (the rollouts of the update from s, logged at s before training): one per
  attempt that reached `log`; an attempt killed before its checkpoint leaves its row (its
  trajectories were really sampled from policy s) and the retry adds another. So at step s
  the count is between (attempts - attempts killed in train) and attempts, and >= 1 below
  the latest step.
- Val rows: at most one per step.
- Retention: the latest step and the best step by `val/reward` (per-step mean, ties to the
  later step), computed from the history on disk, always have a complete checkpoint; only
  complete folders look like steps; temp folders a kill left are gone after the restart.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

from safetensors.torch import load_file

from arthex.adapters.jsonl_history import JsonlHistory
from arthex.adapters.local import checkpoints as ckpt
from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow
from arthex.testing.tiny_model import tiny_model

from ._training_loop import NAME, PROJECT, model_dir, start_child

pytestmark = [pytest.mark.faults, pytest.mark.slow]

RUN = RunRef(PROJECT, NAME)
ATTEMPT_TIMEOUT_S = 60.0
FINAL_EXTRA_STEPS = 3


@attrs.define
class Attempt:
    start: int | None  # None: killed before `register` returned
    events: list[dict[str, Any]]
    exitcode: int | None

    def last_phase(self) -> dict[str, Any] | None:
        phases = [e for e in self.events if e["event"] == "phase"]
        return phases[-1] if phases else None

    def trained_from(self) -> list[int]:
        return [e["step"] for e in self.events if e["event"] == "phase" and e["phase"] == "train"]


def run_attempt(
    base: Path,
    base_model: str,
    dump: Path,
    *,
    steps: int = 10_000,
    kill: tuple[str, int] | None = None,
    random_kill: tuple[str, int] | None = None,
    rng: random.Random | None = None,
) -> Attempt:
    """One child run until it dies or finishes. `random_kill=(phase, n)`: the parent SIGKILLs
    it at a uniformly random moment of the n-th `phase`, as long as that phase took before
    (so the kill lands in it, or just after it on a slower step)."""
    options = {
        "base_path": str(base),
        "base_model": base_model,
        "steps": steps,
        "kill": kill,
        "dump": str(dump),
    }
    process, events_in = start_child(options)
    events: list[dict[str, Any]] = []
    seen: Counter[str] = Counter()
    took: dict[str, float] = {}
    current: tuple[str, float] | None = None
    deadline = time.monotonic() + ATTEMPT_TIMEOUT_S
    try:
        while True:
            left = deadline - time.monotonic()
            assert left > 0, (
                f"{kill or random_kill} made no end in {ATTEMPT_TIMEOUT_S}s: {events[-4:]}"
            )
            if not events_in.poll(min(left, 1.0)):
                continue
            try:
                event = events_in.recv()
            except EOFError:
                break
            events.append(event)
            now = time.monotonic()
            if current is not None:
                took[current[0]] = now - current[1]
                current = None
            if event["event"] == "phase":
                current = (event["phase"], now)
                seen[event["phase"]] += 1
                if random_kill and (event["phase"], seen[event["phase"]]) == random_kill:
                    assert rng is not None
                    time.sleep(rng.uniform(0.0, took.get(event["phase"], 0.1)))
                    assert process.pid is not None
                    os.kill(process.pid, signal.SIGKILL)
    finally:
        process.join(timeout=30)
        if process.is_alive():
            process.kill()
            process.join()
        events_in.close()
    registered = [e["step"] for e in events if e["event"] == "registered"]
    start = registered[0] if registered else None
    return Attempt(start=start, events=events, exitcode=process.exitcode)


def history_rows(base: Path) -> list[MetricsRow]:
    return list(asyncio.run(JsonlHistory(str(base)).rows(RUN)))


def steps_with(rows: list[MetricsRow], key: str) -> list[int]:
    return [r.step for r in rows if r.values.get(key) is not None]


def best_by_history(rows: list[MetricsRow], key: str = "val/reward") -> int | None:
    sums: dict[int, list[float]] = {}
    for row in rows:
        value = row.values.get(key)
        if value is not None:
            cell = sums.setdefault(row.step, [0.0, 0.0])
            cell[0] += value
            cell[1] += 1
    means = [(total / count, step) for step, (total, count) in sums.items()]
    return max(means)[1] if means else None


def checkpoint_files(base: Path, step: int) -> dict[str, Any]:
    folder = ckpt.step_dir(model_dir(base), step)
    return {
        "weights": load_file(str(folder / ckpt.WEIGHTS_FILE)),
        "optimizer": load_file(str(folder / ckpt.OPTIMIZER_FILE)),
    }


def assert_same(live: Mapping[str, Any], saved: Mapping[str, Any], what: str) -> None:
    import torch

    for key, value in live.items():
        assert key in saved, f"{what}: {key} is live but not in the checkpoint"
        assert torch.equal(value, saved[key]), f"{what}: {key} differs from the checkpoint"


@attrs.define
class Ledger:
    """What the parent knows across attempts, to tell an allowed gap from a lost row."""

    train_attempts: Counter[int] = attrs.field(factory=Counter)
    killed_in_train: Counter[int] = attrs.field(factory=Counter)
    missing_loss_rows: set[int] = attrs.field(factory=set)  # gaps on disk now
    gaps_seen: set[int] = attrs.field(factory=set)  # every gap a kill ever left
    unvalidated: set[int] = attrs.field(factory=set)
    kills: list[str] = attrs.field(factory=list)

    def record(self, attempt: Attempt, latest: int) -> None:
        for step in attempt.trained_from():
            self.train_attempts[step] += 1
        last = attempt.last_phase()
        if attempt.exitcode != -signal.SIGKILL or last is None:
            return
        if last["phase"] == "train":
            if latest == last["step"] + 1:
                self.unvalidated.add(latest)  # checkpointed, killed before the val log
            else:
                self.killed_in_train[last["step"]] += 1
        elif last["phase"] == "val":
            self.unvalidated.add(last["step"])  # killed while logging it


def check_disk(base: Path, ledger: Ledger, attempt: Attempt | None) -> int:
    """Every invariant of the module docstring that the files alone can show. Returns the
    latest complete step."""
    mdir = model_dir(base)
    folders = ckpt.step_folders(mdir)
    complete = ckpt.complete_steps(mdir)
    assert folders == complete, f"a step folder without its state file: {folders} vs {complete}"
    assert complete, "no checkpoint at all"
    latest = complete[-1]
    rows = history_rows(base)  # raises on a damaged ledger

    loss = Counter(steps_with(rows, "loss/train"))
    assert all(n == 1 for n in loss.values()), f"duplicate training rows: {loss}"
    assert max(loss, default=0) <= latest, f"a training row beyond checkpoint {latest}: {loss}"
    missing = {s for s in range(1, latest + 1) if s not in loss}
    new_gaps = missing - ledger.missing_loss_rows
    if new_gaps:
        # only the step this attempt just checkpointed, killed before appending its row
        assert attempt is not None and attempt.start is not None, new_gaps
        assert new_gaps == {latest} and latest > attempt.start, (
            f"training rows lost for steps {sorted(new_gaps)} (latest {latest}, attempt from "
            f"{attempt.start if attempt else None})"
        )
    # a gap left by an earlier kill was rebuilt by the restart's register
    assert missing <= {latest}, f"training rows still missing for {sorted(missing)}"
    ledger.missing_loss_rows = missing
    ledger.gaps_seen |= missing

    val = Counter(steps_with(rows, "val/reward"))
    assert all(n == 1 for n in val.values()), f"duplicate val rows: {val}"
    assert max(val, default=0) <= latest

    if attempt is not None:
        ledger.record(attempt, latest)
    train = Counter(steps_with(rows, "train/reward"))
    assert max(train, default=0) <= latest, f"a train-split row beyond step {latest}: {train}"
    assert train[latest] <= ledger.train_attempts[latest]
    for step in range(latest):
        lowest = ledger.train_attempts[step] - ledger.killed_in_train[step]
        assert max(lowest, 1) <= train[step] <= ledger.train_attempts[step], (
            f"step {step}: {train[step]} train-split rows for {ledger.train_attempts[step]} "
            f"attempts, {ledger.killed_in_train[step]} killed in training"
        )

    best = best_by_history(rows)
    assert latest in complete
    if best is not None:
        assert best in complete, f"retention deleted the best step {best}: kept {complete}"
    assert len(complete) <= 3, f"retention fell behind: {complete}"

    store = ParquetTrajectoryStore(base)
    for split in ("train", "val"):
        for step in asyncio.run(store.steps(RUN, split)):
            groups = asyncio.run(store.read(RUN, split, step))  # every visible part reads whole
            assert groups and all(len(g.trajectories) > 0 for g in groups)
    return latest


def check_resume(
    base: Path, dump: Path, attempt: Attempt, expected: int, saved: dict[str, Any]
) -> None:
    """The restarted child stood at the newest complete checkpoint, with its exact tensors."""
    import torch

    registered = next(e for e in attempt.events if e["event"] == "registered")
    assert registered["step"] == expected, (registered, expected)
    entries = registered["entries"]
    assert not [e for e in entries if e.startswith(".")], f"temp folders survived: {entries}"
    live = load_file(str(dump / f"resume-{registered['pid']}.safetensors"))
    weights = {k[2:]: v for k, v in live.items() if k.startswith("w.")}
    optimizer = {k[2:]: v for k, v in live.items() if k.startswith("o.")}
    assert weights and set(optimizer) == set(saved["optimizer"])
    assert_same(weights, saved["weights"], f"weights after resume at {expected}")
    assert_same(optimizer, saved["optimizer"], f"optimizer after resume at {expected}")
    for key, value in optimizer.items():
        if key.endswith(".step"):
            assert float(value) == expected, (
                f"AdamW at step {float(value)} for checkpoint {expected}"
            )
    if expected > 0:
        assert optimizer, "a resumed run lost its optimizer state"
    trained = attempt.trained_from()
    if trained:
        assert trained[0] == expected, f"the restart trained from {trained[0]}, not {expected}"
    assert torch.is_tensor(next(iter(weights.values())))


def test_training_survives_kills_at_every_stage(tmp_path: Path) -> None:
    started = time.monotonic()
    base_model = tiny_model(tmp_path / "tiny")
    base, dump = tmp_path / "runs", tmp_path / "dump"
    dump.mkdir()
    rng = random.Random(20240607)
    # a self-kill (point, n-th time in that child), or a parent's kill during the n-th phase
    schedule: list[dict[str, Any]] = [
        {"kill": ("after-publish", 3)},  # step 0 at register, 1, then 2: no row for 2
        {"kill": ("rollout", 7)},  # one step, then mid-gather of the next
        {"kill": ("pack", 2)},  # train-split row written, optimizer not stepped
        {"kill": ("save-optimizer", 2)},  # temp checkpoint folder half written
        {"kill": ("mid-delete", 1)},  # a doomed folder renamed aside, not removed
        {"kill": ("before-publish", 2)},  # optimizer stepped, checkpoint not written
        {"random_kill": ("train", 2)},
        {"random_kill": ("rollouts", 2)},
        {"random_kill": ("delete", 2)},
    ]
    # a kill while `register` writes step 0 of a new run leaves no step and no history
    first = run_attempt(base, base_model, dump, kill=("save-optimizer", 1))
    assert first.exitcode == -signal.SIGKILL and first.start is None, first.events
    assert ckpt.step_folders(model_dir(base)) == [] and history_rows(base) == []
    ledger = Ledger(kills=["{'kill': ('save-optimizer', 1)} in register: no step 0"])
    expected: int | None = None
    saved: dict[str, Any] = {}
    for plan in schedule:
        attempt = run_attempt(base, base_model, dump, rng=rng, **plan)
        assert attempt.exitcode == -signal.SIGKILL, (plan, attempt.exitcode, attempt.events[-3:])
        assert attempt.start is not None, f"{plan} killed the child before it registered"
        if expected is not None:
            check_resume(base, dump, attempt, expected, saved)
        else:  # the temp folder of the killed register is gone, step 0 written anew
            assert attempt.events[0]["entries"] == ["0000"], attempt.events[0]
        expected = check_disk(base, ledger, attempt)
        last = attempt.last_phase()
        ledger.kills.append(
            f"{plan} from step {attempt.start}: killed in {last and last['phase']} "
            f"-> latest {expected}"
        )
        saved = checkpoint_files(base, expected)

    # the first kill landed after checkpoint 2, before its training row: a gap that the
    # restart rebuilt
    assert 2 in ledger.gaps_seen

    assert expected is not None
    target = expected + FINAL_EXTRA_STEPS
    final = run_attempt(base, base_model, dump, steps=target)
    assert final.exitcode == 0, final.events[-3:]
    check_resume(base, dump, final, expected, saved)
    assert (final.events[-1]["event"], final.events[-1]["step"]) == ("done", target)
    latest = check_disk(base, ledger, final)
    assert latest == target

    rows = history_rows(base)
    loss = steps_with(rows, "loss/train")
    assert sorted(loss) == list(range(1, target + 1))
    val = steps_with(rows, "val/reward")
    assert set(range(1, target + 1)) - set(val) <= ledger.gaps_seen | ledger.unvalidated
    best = best_by_history(rows)
    assert ckpt.complete_steps(model_dir(base)) == sorted({target, best or target})
    final_state = checkpoint_files(base, target)["optimizer"]
    assert {float(v) for k, v in final_state.items() if k.endswith(".step")} == {float(target)}
    took = time.monotonic() - started
    print("\n".join([*ledger.kills, f"{ledger}", f"took {took:.0f}s"]))  # shown with -s
