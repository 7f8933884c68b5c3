"""`arthex eval` as a subprocess on a LocalBackend run directory: the table it prints is the
row it wrote (read back from history.jsonl), and each mistake is one line with exit code 2,
writing nothing."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

import arthex
from arthex.testing.builders import synthetic_groups
from arthex.testing.tiny_model import tiny_model
from tests.e2e.test_cli import arthex_many as cli_many

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


async def trained_run(base: Path, tiny: str) -> None:
    backend = arthex.LocalBackend(full_finetune=True)
    model = arthex.TrainableModel(
        name="agent", project="evals", base_model=tiny, base_path=str(base), report_metrics=[]
    )
    try:
        await model.register(backend)
        await model.train(synthetic_groups(1), {"learning_rate": 1e-2})
    finally:
        await model.close()
        await backend.close()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli-eval")
    tiny = tiny_model(root / "tiny")
    asyncio.run(trained_run(root / ".art", tiny))
    return root / ".art" / "evals" / "models" / "agent"


def arthex_many(*commands: Sequence[str]) -> list[subprocess.CompletedProcess[str]]:
    return cli_many(*commands, cwd=ROOT, timeout=300)  # the rollouts run in the command


def rows_with(path: Path, key: str) -> list[dict[str, Any]]:
    lines = (path / "history.jsonl").read_text().splitlines()
    return [row for line in lines if key in (row := json.loads(line))]


def table(text: str) -> dict[str, str]:
    cells = [
        [cell.strip() for cell in line.strip().strip("│").split("│")]
        for line in text.splitlines()
        if line.startswith("│")
    ]
    return {row[0]: row[1] for row in cells}


def test_eval_logs_the_step_it_names_and_prints_the_row_it_wrote(run_dir: Path) -> None:
    at0, latest = arthex_many(
        ["eval", str(run_dir), "--env", "tests._eval_env:make", "--step", "0", "--k", "3",
         "--split", "held_out"],
        ["eval", str(run_dir), "--env", "tests._eval_env:make", "--examples", "2"],
    )  # fmt: skip
    assert at0.returncode == 0, at0.stderr
    assert latest.returncode == 0, latest.stderr
    assert "evals/agent at step 0, split held_out: 3 examples x 3 rollouts" in at0.stdout
    assert "evals/agent at step 1, split val: 2 examples x 1 rollouts" in latest.stdout

    (row,) = rows_with(run_dir, "held_out/pass@1")
    assert row["step"] == 0
    shown = table(at0.stdout)
    for key in ("held_out/reward", "held_out/pass@1", "held_out/pass@2", "held_out/pass@3"):
        assert float(shown[key]) == pytest.approx(row[key], abs=5e-4), key
    assert "held_out/pass@4" not in shown
    # every number of the row it wrote, the environment's own metrics among them
    metrics = {key for key in row if key not in ("step", "training_step", "recorded_at")}
    assert {"held_out/completion_tokens", "held_out/logprob"} <= metrics
    for key in metrics:
        assert float(shown[key]) == pytest.approx(row[key], abs=5e-4, rel=5e-4), key
    assert shown["failures"] == "0 of 9"
    assert shown["time"].endswith("s")
    assert (run_dir / "trajectories" / "held_out" / "0000.parquet").is_file()

    (val,) = rows_with(run_dir, "val/pass@1")
    assert val["step"] == 1 and float(table(latest.stdout)["val/reward"]) == pytest.approx(
        val["val/reward"], abs=5e-4
    )
    assert (run_dir / "trajectories" / "val" / "0001.parquet").is_file()


def test_eval_mistakes_are_one_line_and_exit_2_writing_nothing(
    run_dir: Path, tmp_path: Path
) -> None:
    before = (run_dir / "history.jsonl").read_bytes()
    model = str(run_dir)
    cases = {
        "MODULE:FACTORY": ["eval", model, "--env", "tests._eval_env"],
        "cannot import 'tests._no_such_module'": [
            "eval", model, "--env", "tests._no_such_module:make"],
        "module 'tests._eval_env' has no 'nope'": [
            "eval", model, "--env", "tests._eval_env:nope"],
        "the factory returned the wrong kind: expected an arthex Environment": [
            "eval", model, "--env", "tests._eval_env:not_an_environment"],
        "the factory raised RuntimeError: the factory could not build its dataset": [
            "eval", model, "--env", "tests._eval_env:broken"],
        "has no checkpoint at step 9": [
            "eval", model, "--env", "tests._eval_env:make", "--step", "9"],
        "is not a model directory": [
            "eval", str(tmp_path), "--env", "tests._eval_env:make"],
    }  # fmt: skip
    results = arthex_many(*cases.values())
    for (expected, command), result in zip(cases.items(), results, strict=True):
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, (command, result.stderr)
        assert lines[0].startswith("arthex: error: ") and expected in lines[0], lines[0]
        assert result.stdout == "", command
    assert "(complete checkpoints: 0, 1)" in results[5].stderr
    assert (run_dir / "history.jsonl").read_bytes() == before
    assert not (run_dir / "trajectories" / "val").exists() or all(
        p.name != "0009.parquet" for p in (run_dir / "trajectories" / "val").iterdir()
    )
