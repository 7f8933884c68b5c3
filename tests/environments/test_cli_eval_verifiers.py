"""`arthex eval --env MODULE:FACTORY` with a factory that returns a verifiers environment (not
an arthex one): the command adapts it, rolls it out against the run's latest checkpoint and
writes the row it prints. A subprocess in the envs venv, on a LocalBackend run directory."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import arthex_vf_arith as vf_arith

import arthex
from arthex.testing.tiny_model import tiny_model

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = Path(__file__).resolve().parent / "plugins"


async def registered_run(base: Path, tiny: str) -> None:
    backend = arthex.LocalBackend()
    model = arthex.TrainableModel(
        name="solver", project="evals", base_model=tiny, base_path=str(base), report_metrics=[]
    )
    try:
        await model.register(backend)
    finally:
        await model.close()
        await backend.close()


def test_eval_adapts_a_verifiers_environment_and_writes_the_row_it_prints(tmp_path: Path) -> None:
    asyncio.run(registered_run(tmp_path / ".art", tiny_model(tmp_path / "tiny")))
    run_dir = tmp_path / ".art" / "evals" / "models" / "solver"
    path = os.pathsep.join([str(ROOT), str(PLUGINS), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "arthex.apps.cli", "eval", str(run_dir),
         "--env", "tests.environments.envs:arith", "--k", "2"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
        env={**os.environ, "PYTHONPATH": path, "PYTHONIOENCODING": "utf-8"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    examples = len(vf_arith.ROWS)
    assert f"split val: {examples} examples x 2 rollouts" in done.stdout
    rows = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    (row,) = [r for r in rows if "val/pass@2" in r]
    assert row["step"] == 0
    assert 0.0 <= row["val/pass@1"] <= row["val/pass@2"] <= 1.0
    assert (run_dir / "trajectories" / "val" / "0000.parquet").is_file()
