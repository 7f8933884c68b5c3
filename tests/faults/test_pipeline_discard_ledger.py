"""The history is the pipeline's ledger of discards, across kills.

A PipelineTrainer run on LocalBackend over 48 scenarios, some of which are always discarded
(their rollouts all earn one reward, or all fail; the stream ends on three such), is SIGKILLed
ten times at random counted points (the N-th record save, history row, discard decision,
batch packing or checkpoint publish of that child) and resumed each time. After each kill the
history never lists fewer discards than the record, nor more than the record and its update in
flight; at the end of the stream the history's `discarded/step/*` rows add up to the record's
discards per reason and `discarded/cum/*` ends at them, and every scenario is trained exactly
once or discarded (tests/_pipeline_checks.py).
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

from arthex.adapters.jsonl_history import JsonlHistory
from arthex.adapters.run_files.pipeline import JsonPipelineStateStore
from arthex.core.identity import RunRef
from arthex.core.pipeline_record import DISCARD_REASONS
from arthex.testing.tiny_model import tiny_model
from tests._pipeline_checks import (
    PIPELINE_ROW_KEY,
    UPDATE_ROW_KEY,
    check_discard_ledger,
    check_run_files,
)

from ._discard_loop import ERRORED, NAME, PROJECT, SCENARIOS, ZERO_VARIANCE, start_child
from ._pipeline_loop import BOUND
from ._training_loop import reap

pytestmark = [pytest.mark.faults, pytest.mark.slow]

RUN = RunRef(PROJECT, NAME)
KILLS = 10
ATTEMPT_TIMEOUT_S = 180.0
# where a child kills itself, and the most arrivals counted before it does
POINTS = [
    ("record-saved", 4),
    ("history-row", 8),
    ("discard", 3),
    ("pack", 3),
    ("after-publish", 3),
]


def run_child(base: Path, base_model: str, kill: tuple[str, int] | None) -> list[dict[str, Any]]:
    """One child until it exits; its events (the last is `done` when the stream ended)."""
    process, events_in = start_child(
        {"base_path": str(base), "base_model": base_model, "kill": kill}
    )
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + ATTEMPT_TIMEOUT_S
    try:
        while True:
            assert time.monotonic() < deadline, f"no end in {ATTEMPT_TIMEOUT_S}s: {events[-3:]}"
            if not events_in.poll(1.0):
                continue
            try:
                events.append(events_in.recv())
            except EOFError:
                break
    finally:
        reap(process, events_in)
    done = any(e["event"] == "done" for e in events)
    expected = 0 if done else -signal.SIGKILL
    assert process.exitcode == expected, (kill, process.exitcode, events[-3:])
    return events


def check_ledger_after_kill(base: Path) -> None:
    """Per reason, the history's discards (summed per step, and the last cumulative count)
    agree with each other and lie between the record's and the record's plus its update in
    flight (whose row the resume writes if the kill came before it)."""
    record = asyncio.run(JsonPipelineStateStore(str(base)).load(RUN))
    rows = asyncio.run(JsonlHistory(str(base)).rows(RUN))
    pipeline_rows = sorted((r for r in rows if PIPELINE_ROW_KEY in r.values), key=lambda r: r.step)
    for reason in DISCARD_REASONS:
        recorded = 0 if record is None else len(record.discarded[reason])
        flight = record.in_flight if record is not None else None
        flying = 0 if flight is None else len(flight.discarded[reason])
        summed = sum(r.values[f"discarded/step/{reason}_groups"] or 0 for r in pipeline_rows)
        last = pipeline_rows[-1].values[f"discarded/cum/{reason}_groups"] if pipeline_rows else 0
        assert summed == last, f"{reason}: the rows add up to {summed}, the last says {last}"
        assert recorded <= summed <= recorded + flying, (
            f"{reason}: the history counts {summed} discards, the record {recorded} "
            f"and {flying} more in flight"
        )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_history_counts_every_discard_the_record_lists_after_ten_kills(
    tmp_path: Path, seed: int
) -> None:
    base_model = tiny_model(tmp_path / "tiny")
    base = tmp_path / "runs"
    rng = random.Random(seed)
    kills: list[tuple[str, int]] = []
    events: list[dict[str, Any]] = []
    for _ in range(KILLS):
        point, most = rng.choice(POINTS)
        kill = (point, rng.randint(1, most))
        events = run_child(base, base_model, kill)
        if events and events[-1]["event"] == "done":
            break  # the stream ended before this kill's point came
        kills.append(kill)
        check_ledger_after_kill(base)
    else:
        events = run_child(base, base_model, None)
    assert len(kills) >= KILLS // 2, f"only {len(kills)} kills landed: {kills}"
    done = events[-1]
    assert done["event"] == "done", events[-3:]
    outcome = asyncio.run(
        check_run_files(base, RUN, steps=done["step"], scenarios=SCENARIOS, bound=BOUND)
    )
    record = outcome.record
    assert set(record.discarded["errored"]) == ERRORED
    assert set(record.discarded["zero_variance"]) | set(record.discarded["stale"]) >= ZERO_VARIANCE
    rows = asyncio.run(JsonlHistory(str(base)).rows(RUN))
    check_discard_ledger(rows, record)
    tail = [r.step for r in rows if PIPELINE_ROW_KEY in r.values and UPDATE_ROW_KEY not in r.values]
    print(  # shown with -s
        f"seed {seed}: {len(kills)} kills {kills}; {done['step']} steps, row of end discards "
        f"at {tail}, "
        f"{len(outcome.trained)} trained, "
        f"discarded { {r: len(record.discarded[r]) for r in DISCARD_REASONS} }"
    )
