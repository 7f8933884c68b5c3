"""The CLI's refusals say what to do next in arthex's one style: `serve` without keys shows
the command that makes one, a busy port points at `--port 0`, lists read as lists (`train,
val`, as steps do), and `runs` and `history` give the same advice in an empty folder."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from pathlib import Path

import pytest

import arthex
from arthex.apps.server.keys import KEYS_ENV, KeyRing
from arthex.core.errors import InvalidInputError
from arthex.testing.builders import make_group
from tests.unit.test_cli_conventions import run


def test_serve_without_keys_shows_the_command_that_makes_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(KEYS_ENV, raising=False)
    with pytest.raises(InvalidInputError) as refused:
        KeyRing.load(None)
    (line,) = str(refused.value).splitlines()
    command = line.split("Make a key and its line with: ", 1)[1]
    made = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    key, stored = made.stdout.split()
    ring = KeyRing.parse(stored, "the printed line")  # what goes in the keys file
    assert ring.tenant_for(key) == "team-a"


def test_a_busy_port_points_at_port_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("fastapi")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code, _, err = run(["view", str(tmp_path), "--port", str(port)], capsys)
    (line,) = err.splitlines()
    assert code == 2 and f"127.0.0.1:{port}" in line and "--port 0 picks a free port" in line


def test_logged_splits_are_listed_as_steps_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = arthex.Model(name="m", project="p", base_path=str(tmp_path), report_metrics=[])

    async def log() -> None:
        for split in ("train", "val"):
            await model.log([make_group()], split=split)

    asyncio.run(log())
    code, _, err = run(
        ["trajectories", "p/m", "--base-path", str(tmp_path), "--split", "x"], capsys
    )
    assert code == 2 and err.strip().endswith(
        "no trajectories for split 'x'; logged splits: train, val"
    )
    code, _, err = run(["trajectories", "p/m", "--base-path", str(tmp_path), "--step", "7"], capsys)
    assert code == 2 and err.strip().endswith("logged steps: 0")


def test_runs_and_history_give_the_same_advice_in_an_empty_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["runs", "--base-path", str(tmp_path)], capsys)
    assert code == 0
    said_by_runs = " ".join(out.split())
    code, _, err = run(["history", "--base-path", str(tmp_path)], capsys)
    assert code == 2
    said_by_history = " ".join(err.split()).removeprefix("arthex: error: ")
    assert said_by_runs == said_by_history
    assert said_by_runs.startswith(f"no models under {tmp_path}; train one (e.g. `")
    assert os.path.basename(tmp_path) in said_by_runs
