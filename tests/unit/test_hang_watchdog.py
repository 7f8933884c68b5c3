"""The hang watchdog (core/watchdog.py) on a real run directory: a rollout that stalls past
ARTHEX_WATCHDOG_S gets its stacks written to `{run}/diagnostics/hang-{time}.txt` and one log
line pointing there; the run goes on; a second report comes only after progress resumed and
stalled again; the watching thread ends with the model (close, garbage collection, exit).

Every wait is on a file appearing, with a deadline, never a bare sleep a slow machine outlasts.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import arthex
from arthex.core.errors import InvalidInputError
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.core.watchdog import WATCHDOG, Watchdog
from arthex.testing.builders import make_choice
from arthex.testing.fakes import InMemoryBackend

DEADLINE_S = 60.0  # a slow, shared machine still writes a report within this
PROMPT = {"role": "user", "content": "2 + 2?"}


def model_in(root: Path, name: str = "agent") -> arthex.TrainableModel:
    return arthex.TrainableModel(
        name=name, project="hang", base_model="in-memory", base_path=str(root), report_metrics=[]
    )


def reports_of(root: Path, name: str = "agent") -> list[Path]:
    return sorted((root / "hang" / "models" / name / "diagnostics").glob("hang-*.txt"))


async def until_reports(root: Path, count: int) -> list[Path]:
    """Wait (without progress: polling is not a step forward) for `count` reports."""
    deadline = time.monotonic() + DEADLINE_S
    while len(found := reports_of(root)) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(found)} hang reports after {DEADLINE_S}s, wanted {count}")
        await asyncio.sleep(0.05)
    return found


def group(reward: float) -> TrajectoryGroup:
    return TrajectoryGroup(
        [
            Trajectory(messages_and_choices=[PROMPT, make_choice("4")], reward=reward),
            Trajectory(messages_and_choices=[PROMPT, make_choice("5")], reward=1 - reward),
        ]
    )


def test_a_stalled_rollout_is_reported_once_per_stall_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("ARTHEX_WATCHDOG_S", "1")
    model = model_in(tmp_path)
    backend = InMemoryBackend()
    seen: dict[str, list[Path]] = {}

    async def stuck_in_first_rollout() -> TrajectoryGroup:
        seen["first"] = await until_reports(tmp_path, 1)
        # still stalled three watchdog periods on: no second report for the same stall (a
        # slow machine only makes this check easier to pass, never flaky)
        await asyncio.sleep(3.0)
        seen["still one"] = reports_of(tmp_path)
        return group(0.0)

    async def stuck_in_second_rollout() -> TrajectoryGroup:
        seen["second"] = await until_reports(tmp_path, 2)  # after the first one finished
        return group(1.0)

    async def main() -> int:
        await model.register(backend)
        groups = await arthex.gather_trajectory_groups(
            [stuck_in_first_rollout(), stuck_in_second_rollout()], progress=False
        )
        result = await model.train(groups, {"learning_rate": 0.1})  # training goes on
        await model.close()
        return result.step

    with caplog.at_level(logging.WARNING, logger="arthex"):
        assert asyncio.run(main()) == 1
    assert len(seen["first"]) == 1 and seen["still one"] == seen["first"]
    assert len(seen["second"]) == 2
    first = seen["first"][0]
    text = first.read_text()
    assert text.startswith("arthex hang report, ")
    assert "(ARTHEX_WATCHDOG_S=1) while in: gather" in text
    assert "-- thread 'MainThread'" in text and "-- thread 'arthex-watchdog' (daemon)" in text
    # each task with its stack through what it awaits: the stalled rollouts are named
    assert "<locals>.stuck_in_first_rollout -> until_reports -> sleep -> a Future\n" in text
    assert "<locals>.stuck_in_second_rollout -> until_reports -> sleep -> a Future\n" in text
    assert ', in stuck_in_first_rollout\n    seen["first"] = await until_reports' in text
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("hang/agent: ")]
    assert len(lines) == 2
    assert re.fullmatch(
        r"hang/agent: no progress in gather for \d+s: stacks of every thread and task written "
        rf"to {re.escape(str(first))} \(training goes on; ARTHEX_WATCHDOG_S=0 turns this off\)",
        lines[0],
    )
    assert not WATCHDOG.running or "hang/agent" not in WATCHDOG.watching


def test_a_healthy_run_writes_no_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARTHEX_WATCHDOG_S", "5")
    model = model_in(tmp_path)

    async def rollout(reward: float) -> TrajectoryGroup:
        await asyncio.sleep(0)
        return group(reward)

    async def main() -> None:
        await model.register(InMemoryBackend())
        for _ in range(3):
            groups = await arthex.gather_trajectory_groups(
                [rollout(0.0), rollout(1.0)], progress=False
            )
            await model.train(groups, {"learning_rate": 0.1})
        assert "hang/agent" in WATCHDOG.watching and WATCHDOG.running
        await model.close()

    asyncio.run(main())
    assert reports_of(tmp_path) == []
    assert "hang/agent" not in WATCHDOG.watching


def test_the_watching_ends_when_the_model_is_closed_or_collected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARTHEX_WATCHDOG_S", "30")

    async def registered(name: str) -> arthex.TrainableModel:
        model = model_in(tmp_path, name)
        await model.register(InMemoryBackend())
        return model

    async def main() -> None:
        closed = await registered("closed")
        assert "hang/closed" in WATCHDOG.watching
        await closed.close()
        assert "hang/closed" not in WATCHDOG.watching
        await registered("dropped")  # never closed, dropped at once
        gc.collect()
        assert "hang/dropped" not in WATCHDOG.watching

    asyncio.run(main())
    if not WATCHDOG.watching:
        assert not WATCHDOG.running


def test_a_process_that_never_closes_its_model_exits_with_no_watchdog_thread(
    tmp_path: Path,
) -> None:
    script = textwrap.dedent(
        """
        import atexit, sys, threading

        def report() -> None:
            left = sorted(t.name for t in threading.enumerate() if t is not threading.main_thread())
            sys.stderr.write(f"threads at exit: {left}\\n")

        atexit.register(report)  # first registered: runs after every other exit hook

        import asyncio, os
        import arthex
        from arthex.core.watchdog import WATCHDOG, Watchdog
        from arthex.testing.fakes import InMemoryBackend

        os.environ["ARTHEX_WATCHDOG_S"] = "30"
        model = arthex.TrainableModel(
            name="agent", project="exit", base_model="m", base_path=sys.argv[1],
            report_metrics=[],
        )
        asyncio.run(model.register(InMemoryBackend()))
        print(f"watching: {WATCHDOG.running}", flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "watching: True"
    assert "threads at exit: []" in done.stderr


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf"])
def test_a_bad_watchdog_setting_is_one_line_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("ARTHEX_WATCHDOG_S", value)
    model = model_in(tmp_path)
    with pytest.raises(InvalidInputError) as refused:
        asyncio.run(model.register(InMemoryBackend()))
    assert str(refused.value) == (
        "ARTHEX_WATCHDOG_S must be a number of seconds >= 0 (0 turns the hang watchdog off), "
        f"got {value!r}"
    )
    assert not (tmp_path / "hang" / "models" / "agent" / "model.json").exists()


def test_zero_turns_the_watchdog_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARTHEX_WATCHDOG_S", "0")
    model = model_in(tmp_path)

    async def main() -> None:
        await model.register(InMemoryBackend())
        assert "hang/agent" not in WATCHDOG.watching
        await model.close()

    asyncio.run(main())


def test_each_run_is_reported_after_its_own_timeout_only(tmp_path: Path) -> None:
    """Two runs watched in one process: a stall past the short timeout is reported to its run;
    the run with the long one hears of it only if the stall lasts that long too."""
    dog = Watchdog()
    written: dict[str, list[str]] = {"short": [], "long": []}

    def writer(label: str) -> Callable[[str, str], str]:
        def write(name: str, text: str) -> str:
            path = tmp_path / f"{label}-{name}"
            path.write_text(text)
            written[label].append(str(path))
            return str(path)

        return write

    detach_short = dog.attach("short", 1.0, writer("short"), lambda: "rank 0: waiting\n")
    detach_long = dog.attach("long", 600.0, writer("long"), None)
    try:
        with dog.activity("train"):
            deadline = time.monotonic() + DEADLINE_S
            while not written["short"]:
                assert time.monotonic() < deadline, "no report within the deadline"
                time.sleep(0.05)
        assert written["long"] == []
        (report,) = written["short"]
        text = Path(report).read_text()
        assert "while in: train" in text and text.endswith("== trainer ranks ==\nrank 0: waiting\n")
        assert dog.reports == [report]
    finally:
        detach_short()
        detach_long()
    assert not dog.running


def test_a_model_collected_while_its_thread_holds_the_watchdog_does_not_deadlock() -> None:
    """The collector runs finalizers at any allocation, on whichever thread allocates: a
    watched model collected while that thread is inside the watchdog's lock (seen in a full
    suite run: `activity`'s exit deleting its counter entry, a gc pass, the model's detaching
    finalizer) detaches later instead of waiting for the lock its own thread holds."""
    import threading
    import weakref
    from collections import Counter

    watchdog = Watchdog()

    class CollectingCounter(Counter[str]):  # a gc pass exactly where the suite's came
        def __delitem__(self, key: object) -> None:
            super().__delitem__(key)
            gc.collect()

    watchdog._busy = CollectingCounter()

    class Watched:  # a model's stand-in: it holds the finalizer, in a cycle only gc frees
        me: object = None

    holder: Watched | None = Watched()
    assert holder is not None
    holder.me = holder
    weakref.finalize(holder, watchdog.attach("p/m", 600.0, None, None))
    assert watchdog.watching == ["p/m"] and watchdog.running

    def train_while_the_model_is_dropped() -> None:
        nonlocal holder
        with watchdog.activity("train"):
            holder = None  # unreachable now; collected as the activity ends

    worker = threading.Thread(target=train_while_the_model_is_dropped, daemon=True)
    worker.start()
    worker.join(timeout=60)  # a deadline: a deadlock never ends
    assert not worker.is_alive(), "the collected model's detach waited on its own thread's lock"
    assert watchdog.watching == []
    deadline = time.monotonic() + 60
    while watchdog.running:  # the watching thread ends on its own with nothing to watch
        assert time.monotonic() < deadline
        time.sleep(0.05)
