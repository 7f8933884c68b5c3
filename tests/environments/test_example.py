"""examples/verifiers_env.py runs: it evaluates, trains two steps and evaluates again, and the
run's history holds both evaluations (in the envs venv: the example needs verifiers)."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "verifiers_env.py"


def test_the_verifiers_example_trains_and_evaluates_before_and_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "art"
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), "--steps", "2", "--base-path", str(base)])
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    printed = capsys.readouterr().out
    assert "before training: mean reward" in printed and "after 2 steps" in printed
    history = base / "verifiers" / "models" / "sums" / "history.jsonl"
    rows = [json.loads(line) for line in history.read_text().splitlines()]
    val = [row for row in rows if "val/reward" in row]
    assert [row["step"] for row in val] == [0, 2]
    assert sum("loss/train" in row for row in rows) == 2
    before = float(printed.split("before training: mean reward ")[1].split(",")[0])
    assert val[0]["val/reward"] == pytest.approx(before, abs=5e-4)
