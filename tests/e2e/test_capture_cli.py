"""`arthex trajectories` shows a captured run: its calls as the conversations they form."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.core.identity import RunRef
from arthex.core.trajectories import TrajectoryGroup
from tests._chat_script import ChatScript
from tests.e2e.test_cli import arthex_cli
from tests.unit.test_capture_samples import captured, weather_reply

pytestmark = pytest.mark.e2e


def test_trajectories_prints_a_captured_run(tmp_path: Path) -> None:
    kept = captured(ChatScript(weather_reply))
    rewritten = captured(ChatScript(weather_reply), rewrite=True)
    rewritten.metadata["capture_incomplete"] = True
    store = ParquetTrajectoryStore(str(tmp_path))
    asyncio.run(
        store.write(RunRef("proj", "captured"), "train", 0, [TrajectoryGroup([kept, rewritten])])
    )

    shown = arthex_cli("trajectories", "proj/captured", "--base-path", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("captured: 3 calls") == 2
    assert "incomplete" in shown.stdout and "conversation 1:" in shown.stdout
    assert 'get_weather({"city": "Paris"})' in shown.stdout
    assert "tool[call_0]: sunny, 21C" in shown.stdout
    assert "assistant: sunny" in shown.stdout


def test_trajectories_marks_the_replies_of_a_captured_run_as_trainable(tmp_path: Path) -> None:
    """Each reply the model sampled (three per agent run, by the script's own count) is marked
    once, where its conversation shows it; the agent's and the tools' messages are not."""
    scripts = [ChatScript(weather_reply), ChatScript(weather_reply)]
    kept = captured(scripts[0])
    rewritten = captured(scripts[1], rewrite=True)
    store = ParquetTrajectoryStore(str(tmp_path))
    asyncio.run(
        store.write(RunRef("proj", "captured"), "train", 0, [TrajectoryGroup([kept, rewritten])])
    )

    shown = arthex_cli("trajectories", "proj/captured", "--base-path", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    marked = [line.strip() for line in shown.stdout.splitlines() if "[trainable]" in line]
    assert len(marked) == sum(len(script.sampled) for script in scripts) == 6
    assert all(line.startswith("[trainable] assistant:") for line in marked), marked
    assert marked.count("[trainable] assistant: sunny") == 1  # the first agent's answer
    assert "[trainable] user" not in shown.stdout and "[trainable] tool" not in shown.stdout
