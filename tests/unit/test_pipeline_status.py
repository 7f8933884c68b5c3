"""What a PipelineTrainer shows while it trains: on a terminal the progress line the
synchronous loop draws (a pty, in a child process), elsewhere one log line per update, at most
one every `log_interval_seconds` (ART's name and default), and the last update's line when
the run ends. In-memory ports and event-loop turns, as in test_pipeline.py."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from arthex.core.errors import InvalidInputError
from arthex.core.pipeline.status import PipelineStatus
from tests._progress import frames

from ._pipeline_world import World
from .test_pipeline_updates import one_at_a_time

ROOT = Path(__file__).resolve().parents[2]


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("pipeline ")]


@pytest.fixture
def not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """stderr as in a job's log: not a TTY (whatever the terminal running the tests)."""
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    return stream


def test_off_a_terminal_each_update_is_one_log_line_and_nothing_is_drawn(
    caplog: pytest.LogCaptureFixture, not_a_terminal: io.StringIO
) -> None:
    world = World()
    with caplog.at_level(logging.INFO, logger="arthex"):
        asyncio.run(one_at_a_time(world, 5, max_steps=3, log_interval_seconds=1e-9).train())
    # scenario s scores s and s + 1 (two_rewards): the update making step k trains s = k - 1
    assert lines(caplog) == [
        f"pipeline pipe/model: update {k}/3: step {k} reward={k - 0.5:.3g} "
        f"loss={loss:.4g} trained=1 discarded=0 queue=0"
        for k, loss in zip(range(1, 4), _losses(world), strict=True)
    ]
    assert not_a_terminal.getvalue() == ""


def _losses(world: World) -> list[float]:
    rows = asyncio.run(world.history.rows(world.model().run))
    losses = [r.values.get("loss/train") for r in rows]
    return [loss for loss in losses if loss is not None]


def test_off_a_terminal_the_interval_holds_lines_back_and_the_last_is_logged_at_the_end(
    caplog: pytest.LogCaptureFixture, not_a_terminal: io.StringIO
) -> None:
    with caplog.at_level(logging.INFO, logger="arthex"):
        asyncio.run(one_at_a_time(World(), 6, max_steps=4).train())  # ART's 60 s default
    shown = lines(caplog)
    assert [line.split(":")[1] for line in shown] == [" update 1/4", " update 4/4"]


def test_the_interval_allows_one_line_per_interval_by_the_clock() -> None:
    now = [0.0]
    status = PipelineStatus(
        "pipeline p/m: update",
        total=None,
        log_interval_seconds=60.0,
        stream=io.StringIO(),
        clock=lambda: now[0],
    )
    logged: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("arthex")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        for step, at in enumerate([0.0, 10.0, 59.9, 60.0, 75.0, 200.0, 201.0], start=1):
            now[0] = at
            status.update_done(step, 2, {"train/reward": 0.5})
        status.close()
        status.close()  # closing twice logs nothing more
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert [line.split(": ")[2].split(" reward")[0] for line in logged] == [
        "step 1",
        "step 4",  # 60 s after the first
        "step 6",  # 140 s after the last
        "step 7",  # held back by the interval, logged at the end
    ]


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), "60", True])
def test_a_bad_log_interval_is_refused_in_one_line(value: object) -> None:
    with pytest.raises(InvalidInputError) as caught:
        one_at_a_time(World(), 1, log_interval_seconds=value)
    assert str(caught.value) == f"log_interval_seconds must be a number > 0, got {value!r}"


def test_on_a_terminal_the_pipeline_draws_one_progress_line() -> None:
    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path])}
    child = subprocess.Popen(
        [sys.executable, "-m", "tests._pipeline_tty"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=follower,
    )
    os.close(follower)
    drawn = b""
    try:
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(leader)
        assert child.wait(timeout=120) == 0, drawn.decode(errors="replace")
    text = drawn.decode().replace("\r\n", "\n")
    assert text.endswith("\n") and text.count("\n") == 1  # one line, ended when the run ends
    shown = frames(text)
    bars = ["#" * (24 * k // 3) + "." * (24 - 24 * k // 3) for k in range(1, 4)]
    assert [line for line, _ in shown] == [
        f"pipeline pipe/model: update [{bar}] {k}/3 failed=0" for k, bar in enumerate(bars, start=1)
    ]
    assert [note.split(" loss=")[0] for _, note in shown] == [
        f"step {k} reward={k - 0.5:.3g}" for k in range(1, 4)
    ]
