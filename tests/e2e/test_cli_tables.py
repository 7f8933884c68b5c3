"""The commands' tables in an 80-column terminal: every line fits, nothing is cut to an
ellipsis, every header and every value is printed whole. The run is the one test_cli.py
builds, plus a model with a demo-length name."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_cli import build_runs, history_rows

pytestmark = pytest.mark.e2e

LONG = "digits-20250101-120000-123456"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("narrow") / ".art"
    asyncio.run(build_runs(root))
    long = root / "demo" / "models" / LONG
    long.mkdir(parents=True)
    row = {"train/reward": 0.25, "step": 7, "recorded_at": "2024-05-01T12:00:00+00:00"}
    (long / "history.jsonl").write_text(json.dumps(row) + "\n")
    return root


def narrow(*args: str) -> str:
    environment = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1", "PYTHONIOENCODING": "utf-8"}
    done = subprocess.run(
        [sys.executable, "-m", "arthex.apps.cli", *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, done.stdout
    assert "…" not in done.stdout, done.stdout
    return done.stdout


def cells(text: str) -> list[str]:
    return [cell.strip() for line in text.splitlines() for cell in line.split("│")]


def test_runs_history_and_prune_stay_whole_at_80_columns(base: Path) -> None:
    runs = narrow("runs", "--base-path", str(base))
    for header in ("model", "step", "best", "checkpoints", "disk", "updated"):
        assert header in cells(runs.replace("┃", "│"))
    assert f"demo/{LONG}" in cells(runs) and "train/reward 0.25 @ 7" in cells(runs)

    keys = ["val/reward", "val/reward_std_dev", "train/reward", "train/reward_std_dev"]
    keys += ["loss/train", "loss/grad_norm"]
    shown = narrow("history", "proj/agent", "--base-path", str(base), "-k", ",".join(keys))
    headers = cells(shown.replace("┃", "│"))
    assert all(key in headers for key in keys), shown
    values = cells(shown)
    for row in history_rows(base):
        for key in keys:
            if key in row:
                assert f"{row[key]:.4g}" in values, (key, row[key])

    pruned = narrow("prune", "proj/agent", "--base-path", str(base))
    assert "keep (best max)" in cells(pruned) and "keep (latest)" in cells(pruned)
