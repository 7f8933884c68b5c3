"""ART's `log_constant_metrics_wandb` on the real wandb SDK in offline mode: a baseline run
whose every step holds the same values, read back from the offline run's own files."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from arthex.art import Model
from arthex.art.utils.benchmarking.log_constant_metrics_wandb import log_constant_metrics_wandb
from arthex.core.errors import InvalidInputError
from arthex.testing.wandb_offline import finished_runs, sandbox_environment

wandb = pytest.importorskip("wandb")

pytestmark = pytest.mark.e2e


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    sandbox_environment(monkeypatch, tmp_path / "wandb-home")
    yield
    wandb.teardown()


def test_a_baseline_logs_the_same_values_at_every_step(offline: None, tmp_path: Path) -> None:
    model = Model(name="gpt-baseline", project="bench", base_path=str(tmp_path), report_metrics=[])
    metrics = {"train": {"reward": 0.5}, "val": {"reward": 0.25, "accuracy": 0.75}}
    asyncio.run(log_constant_metrics_wandb(model, 3, metrics))
    (run,) = finished_runs(tmp_path / "bench" / "models" / "gpt-baseline")
    rows = [{k: v for k, v in row.items() if not k.startswith("_")} for row in run.history]
    expected = {"train/reward": 0.5, "val/reward": 0.25, "val/accuracy": 0.75}
    assert rows == [expected] * 4  # steps 0, 1, 2 and 3
    assert [row["_step"] for row in run.history] == [0, 1, 2, 3]


def test_bad_values_are_refused_before_a_run_starts(offline: None, tmp_path: Path) -> None:
    model = Model(name="m", project="bench", base_path=str(tmp_path), report_metrics=[])
    for steps, metrics, message in (
        (-1, {"val": {"reward": 1.0}}, "num_steps must be an integer >= 0, not -1"),
        (2, {"val": {"reward": float("nan")}}, "val/reward must be a finite number, not nan"),
        (2, {"val": {"reward": True}}, "val/reward must be a finite number, not True"),
        (2, {"../x": {"reward": 1.0}}, "split"),
    ):
        with pytest.raises(InvalidInputError, match=message):
            asyncio.run(log_constant_metrics_wandb(model, steps, metrics))
    assert not (tmp_path / "bench").exists()
