"""A pipeline run on LocalBackend survives 50 SIGKILLs: at random moments (before and after
`register`, during rollouts, updates, checkpoint writes, record saves) and at chosen points of
an update, each followed by a restart with `resume=True`.

After each kill the restarted child's live weights and optimizer tensors are bitwise the
newest checkpoint's, and no scenario is in the train split twice. At the end of the stream:
every scenario was trained exactly once or counted as discarded, no step is missing or repeated
in the train split or the history (training rows, pipeline rows, train-split rows), the record
has nothing pending, and the final weights are the last checkpoint's.

Every kill lands by construction: a child that is to be killed holds (reports `held` and waits
for its SIGKILL) after its third update and before the rollout of the stream's last scenario,
so no machine speed lets an attempt finish the stream before its timed kill; a child that
gets to a hold first is killed there. The stream is long enough that 50 attempts of at most
three updates each leave scenarios untrained before the 3rd chosen-point kill (so those land
at their points), and the points include one inside `register` (so some kills land before it).

It takes about 3.5 minutes on 2 cores shared with other work (load average 13; most of it the
51 child starts, each loading the model and starting its inference server).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections import Counter
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
from arthex.adapters.run_files.pipeline import JsonPipelineStateStore
from arthex.core.identity import RunRef
from arthex.core.pipeline.measures import STREAM_INDEX_KEY
from arthex.testing.tiny_model import tiny_model
from tests._pipeline_checks import TRAINING_ROW_KEY, check_run_files

from ._pipeline_loop import BOUND, HOLD_STEPS, NAME, PROJECT, model_dir, start_child
from ._training_loop import reap
from .test_kill_resume import assert_same

pytestmark = [pytest.mark.faults, pytest.mark.slow]

RUN = RunRef(PROJECT, NAME)
KILLS = 50
SCENARIOS = 300  # 150 updates; attempts 1-30 make at most 30 x HOLD_STEPS = 90 of them
ATTEMPT_TIMEOUT_S = 120.0
# self-kills at points of an update a random moment rarely hits (counted in that child)
POINTS = [
    ("pack", 1),  # the batch is logged at (train, N), the optimizer has not stepped
    ("before-publish", 1),  # the optimizer stepped, checkpoint N+1 not written
    ("after-publish", 1),  # N+1 is durable, its rows are not written
    ("record-saved", 2),  # the first update's intent was just saved
    ("save-optimizer", 1),  # mid checkpoint write
]
# self-kills inside `register` (weights and optimizer loaded, no engine yet), so some kills
# land before it whatever the machine's speed
IN_REGISTER = ("make-engine", 1)


@attrs.define
class Attempt:
    events: list[dict[str, Any]]
    exitcode: int | None
    plan: str

    def first(self, name: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e["event"] == name), None)

    def steps(self) -> list[int]:
        return [e["step"] for e in self.events if e["event"] == "step"]

    def timings(self) -> tuple[float | None, float | None]:
        """Seconds to register, and the mean seconds per step, when seen."""
        registered = self.first("registered")
        times = [e["at"] for e in self.events if e["event"] in ("registered", "step")]
        per_step = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None
        return (registered["at"] if registered else None), per_step


def run_attempt(
    base: Path,
    base_model: str,
    dump: Path,
    *,
    kill: tuple[str, int] | None = None,
    kill_after: tuple[str, float] | None = None,
) -> Attempt:
    """One child until it exits or is killed; `kill_after=(event, s)` SIGKILLs it `s` seconds
    after its first `event` ("start": its start). A child that is to be killed (`kill` or
    `kill_after` given) holds instead of ending (see _pipeline_loop.py) and is killed as soon
    as it reports `held`."""
    options = {
        "base_path": str(base),
        "base_model": base_model,
        "dump": str(dump),
        "scenarios": SCENARIOS,
        "kill": kill,
        "hold": kill is not None or kill_after is not None,
    }
    process, events_in = start_child(options)
    events: list[dict[str, Any]] = []
    begun = time.monotonic()
    deadline = begun + ATTEMPT_TIMEOUT_S
    kill_at = None
    if kill_after is not None and kill_after[0] == "start":
        kill_at = time.monotonic() + kill_after[1]
    try:
        while True:
            now = time.monotonic()
            assert now < deadline, f"no end in {ATTEMPT_TIMEOUT_S}s: {events[-3:]}"
            if kill_at is not None and now >= kill_at:
                assert process.pid is not None
                os.kill(process.pid, signal.SIGKILL)
                kill_at = None
            wait = min(deadline - now, 1.0 if kill_at is None else max(kill_at - now, 0.0))
            if not events_in.poll(wait):
                continue
            try:
                event = events_in.recv()
            except EOFError:
                break
            events.append({**event, "at": time.monotonic() - begun})
            if event["event"] == "held":
                kill_at = time.monotonic()  # now: it went as far as it may
                continue
            if kill_after is not None and kill_at is None and event["event"] == kill_after[0]:
                kill_at = time.monotonic() + kill_after[1]
    finally:
        reap(process, events_in)
    return Attempt(events, process.exitcode, str(kill or kill_after))


def check_resumed_weights(base: Path, dump: Path, attempt: Attempt, kind: str) -> None:
    """What the child had in memory equals the newest checkpoint's files, bitwise."""
    event = attempt.first("registered" if kind == "resume" else "done")
    assert event is not None
    live = load_file(str(dump / f"{kind}-{event['pid']}.safetensors"))
    folder = ckpt.step_dir(model_dir(base), event["step"])
    saved = {
        "weights": load_file(str(folder / ckpt.WEIGHTS_FILE)),
        "optimizer": load_file(str(folder / ckpt.OPTIMIZER_FILE)),
    }
    weights = {k[2:]: v for k, v in live.items() if k.startswith("w.")}
    optimizer = {k[2:]: v for k, v in live.items() if k.startswith("o.")}
    assert weights, "no weights dumped"
    assert_same(weights, saved["weights"], f"{kind} weights at step {event['step']}")
    assert_same(optimizer, saved["optimizer"], f"{kind} optimizer at step {event['step']}")
    assert set(optimizer) == set(saved["optimizer"])


def check_no_repeats(base: Path) -> None:
    store = ParquetTrajectoryStore(str(base))
    seen: Counter[Any] = Counter()
    for step in asyncio.run(store.steps(RUN, "train")):
        for group in asyncio.run(store.read(RUN, "train", step)):
            seen[group.metadata[STREAM_INDEX_KEY]] += 1
    assert not [i for i, n in seen.items() if n > 1], f"trained twice: {seen.most_common(3)}"
    rows = asyncio.run(JsonlHistory(str(base)).rows(RUN))
    training = Counter(r.step for r in rows if TRAINING_ROW_KEY in r.values)
    assert all(n == 1 for n in training.values()), f"training rows repeated: {training}"


def test_a_pipeline_run_survives_fifty_kills_with_every_scenario_trained_once(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    base_model = tiny_model(tmp_path / "tiny")
    base, dump = tmp_path / "runs", tmp_path / "dump"
    dump.mkdir()
    rng = random.Random(16)
    register_s, step_s = 2.0, 1.0  # running estimates, for where random kills land
    landed: Counter[str] = Counter()
    in_flight_left = held = 0
    for number in range(KILLS):
        if number % 10 == 9:
            attempt = run_attempt(base, base_model, dump, kill=POINTS[(number // 10) % len(POINTS)])
        elif number % 10 == 4:
            attempt = run_attempt(base, base_model, dump, kill=IN_REGISTER)
        elif rng.random() < 0.15:
            attempt = run_attempt(
                base, base_model, dump, kill_after=("start", rng.uniform(0.0, register_s))
            )
        else:
            attempt = run_attempt(
                base, base_model, dump, kill_after=("registered", rng.uniform(0.0, 3 * step_s))
            )
        assert attempt.exitcode == -signal.SIGKILL, (attempt.plan, attempt.events[-3:])
        took_register, took_step = attempt.timings()
        register_s = took_register or register_s
        step_s = 0.5 * step_s + 0.5 * took_step if took_step else step_s
        assert attempt.first("done") is None, "the stream ended before the kills did"
        assert len(attempt.steps()) <= HOLD_STEPS, attempt.events[-3:]
        if attempt.first("held") is not None:
            held += 1
        if attempt.first("registered") is not None:
            check_resumed_weights(base, dump, attempt, "resume")
            landed[f"after {len(attempt.steps())} steps"] += 1
        else:
            landed["before register"] += 1
        check_no_repeats(base)
        record = asyncio.run(JsonPipelineStateStore(str(base)).load(RUN))
        in_flight_left += record is not None and record.in_flight is not None
    assert landed["before register"] >= 1 and in_flight_left >= 3, (landed, in_flight_left)

    final = run_attempt(base, base_model, dump)
    assert final.exitcode == 0 and final.first("done") is not None, final.events[-3:]
    check_resumed_weights(base, dump, final, "resume")
    check_resumed_weights(base, dump, final, "final")
    steps = final.first("done")["step"]  # type: ignore[index]
    assert ckpt.complete_steps(model_dir(base))[-1] == steps
    outcome = asyncio.run(check_run_files(base, RUN, steps=steps, scenarios=SCENARIOS, bound=BOUND))
    print(  # shown with -s
        f"{KILLS} kills in {time.monotonic() - started:.0f}s: {dict(landed)}, "
        f"{in_flight_left} left an update in flight, {held} held first; {steps} steps, "
        f"{len(outcome.trained)} trained, discarded {len(outcome.discarded)}"
    )
