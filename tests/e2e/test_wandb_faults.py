"""wandb failing mid-run: training and the ledger carry on, one warning, the mirror goes quiet.

The fault is injected at the SDK boundary: `wandb.Run.log` (or `finish`) starts raising after a
few real calls, as it would when wandb's service dies or its disk fills. Runs are offline and
read back from their files, so "later rows not sent" is checked on what wandb really kept.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from arthex.adapters.jsonl_history import JsonlHistory
from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.adapters.wandb_reporter import RUN_RECORD, WandbReporter, WandbUnavailableError
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow
from arthex.core.model import ModelPorts
from arthex.core.trainable import TrainableModel
from arthex.testing.builders import make_group
from arthex.testing.fakes.backend import InMemoryBackend
from arthex.testing.wandb_offline import (
    OfflineRun,
    finished_runs,
)

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

wandb = pytest.importorskip("wandb")

RUN = RunRef("proj", "faulty")
OFFLINE_SETTINGS = {
    "x_disable_stats": True,
    "x_disable_machine_info": True,
    "disable_git": True,
    "disable_code": True,
    "silent": True,
}


@pytest.fixture(scope="module", autouse=True)
def offline_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    home = tmp_path_factory.mktemp("wandb-home")
    patch = pytest.MonkeyPatch()
    for name in ("CONFIG", "CACHE", "DATA", "ARTIFACT"):
        patch.setenv(f"WANDB_{name}_DIR", str(home / name.lower()))
    patch.setenv("WANDB_SILENT", "true")
    patch.delenv("WANDB_DIR", raising=False)
    yield
    wandb.teardown()  # stops the SDK's service process
    patch.undo()


def fail_after(monkeypatch: pytest.MonkeyPatch, method: str, calls: int) -> list[Any]:
    """Make `wandb.Run.<method>` raise from call `calls + 1` on; returns the calls that went
    through to the real SDK."""
    real: Callable[..., Any] = getattr(wandb.Run, method)
    passed: list[Any] = []

    def flaky(self: Any, *args: Any, **kwargs: Any) -> Any:
        if len(passed) >= calls:
            raise ConnectionResetError(f"injected: wandb {method} failed")
        passed.append(args)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(wandb.Run, method, flaky)
    return passed


def wandb_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "arthex.wandb" and r.levelno >= logging.WARNING]


def offline_runs(reporter: WandbReporter, run: RunRef) -> list[OfflineRun]:
    return finished_runs(reporter.record_path(run).parent)


def test_log_failure_warns_once_and_later_rows_are_not_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    reporter = WandbReporter(
        str(tmp_path), mode="offline", settings=OFFLINE_SETTINGS, sample_tables=2
    )
    passed = fail_after(monkeypatch, "log", 2)
    rows = [MetricsRow(step=step, values={"val/reward": float(step)}) for step in range(5)]

    async def go() -> None:
        for row in rows:
            await reporter.report(RUN, row)  # never raises, before or after the fault
        reporter.update_config(RUN, {"train": {"learning_rate": 1.0}})
        await reporter.report_samples(RUN, "val", 5, [make_group()])
        await reporter.report(RunRef("proj", "another"), rows[0])
        await reporter.close()
        await reporter.close()

    with caplog.at_level(logging.WARNING, logger="arthex.wandb"):
        asyncio.run(go())

    (warning,) = wandb_warnings(caplog)
    assert "injected: wandb log failed" in warning.getMessage()
    assert reporter.quiet
    assert len(passed) == 2
    (found,) = offline_runs(reporter, RUN)
    assert [row.values for row in found.rows()] == [{"val/reward": 0.0}, {"val/reward": 1.0}]
    assert "train" not in found.config
    assert not reporter.record_path(RunRef("proj", "another")).exists()  # no new run once quiet


def test_finish_failure_in_close_is_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    reporter = WandbReporter(str(tmp_path), mode="offline", settings=OFFLINE_SETTINGS)
    real_finish = wandb.Run.finish

    def finish_then_fail(self: Any, *args: Any, **kwargs: Any) -> None:
        real_finish(self, *args, **kwargs)  # really finish, so no run is left behind
        raise OSError("injected: finish failed")

    monkeypatch.setattr(wandb.Run, "finish", finish_then_fail)

    async def go() -> None:
        await reporter.report(RUN, MetricsRow(step=0, values={"val/reward": 1.0}))
        await reporter.close()
        await reporter.close()

    with caplog.at_level(logging.WARNING, logger="arthex.wandb"):
        asyncio.run(go())
    assert len(wandb_warnings(caplog)) == 1
    (found,) = offline_runs(reporter, RUN)
    assert [row.values for row in found.rows()] == [{"val/reward": 1.0}]


def test_training_completes_and_the_history_is_complete_when_wandb_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = str(tmp_path / ".art")
    reporter = WandbReporter(root, mode="offline", settings=OFFLINE_SETTINGS)
    store = ParquetTrajectoryStore(root)
    model = TrainableModel(
        name=RUN.name,
        project=RUN.project,
        base_model="tiny",
        base_path=root,
        ports=ModelPorts(store=store, reporter=JsonlHistory(root), mirrors=[reporter]),
    )
    fail_after(monkeypatch, "log", 3)

    async def go() -> int:
        await model.register(InMemoryBackend())
        for _ in range(3):
            await model.train([make_group((0.0, 1.0)), make_group((1.0, 0.5))])
            await model.log([make_group((0.25, 0.75))], split="val")
        step = await model.get_step()
        await model.close()
        return step

    with caplog.at_level(logging.WARNING, logger="arthex.wandb"):
        final_step = asyncio.run(go())

    assert final_step == 3
    assert len(wandb_warnings(caplog)) == 1
    history = list(asyncio.run(JsonlHistory(root).rows(RUN)))
    # Per round: the train batch at N, the training metrics at N+1, the eval at N+1.
    assert [row.step for row in history] == [0, 1, 1, 1, 2, 2, 2, 3, 3]
    assert all("train/reward" in history[i].values for i in (0, 3, 6))
    assert all("loss/train" in history[i].values for i in (1, 4, 7))
    assert all("val/reward" in history[i].values for i in (2, 5, 8))
    assert asyncio.run(store.steps(RUN, "train")) == [0, 1, 2]
    assert asyncio.run(store.steps(RUN, "val")) == [1, 2, 3]
    # wandb kept exactly the rows logged before the fault, with the ledger's values.
    (found,) = offline_runs(reporter, RUN)
    mirrored = found.rows()
    assert len(mirrored) == 3
    for got, want in zip(mirrored, history[:3], strict=True):
        assert got.step == want.step
        assert got.values == {k: v for k, v in want.values.items() if v is not None}
    assert found.config["model"]["name"] == RUN.name
    assert "train" in found.config  # the training config reached the run before the fault


def failing_init(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[int]:
    """`wandb.init` raises ConnectionError for its first `failures` calls; returns the count
    of calls made."""
    real = wandb.init
    calls: list[int] = []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) <= failures:
            raise ConnectionError("injected: wandb.init could not connect")
        return real(*args, **kwargs)

    monkeypatch.setattr(wandb, "init", flaky)
    return calls


def model_with(root: str, reporter: WandbReporter) -> TrainableModel:
    return TrainableModel(
        name=RUN.name,
        project=RUN.project,
        base_model="tiny",
        base_path=root,
        ports=ModelPorts(
            store=ParquetTrajectoryStore(root), reporter=JsonlHistory(root), mirrors=[reporter]
        ),
    )


def test_a_failing_init_fails_the_first_call_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The defect: init failed at the first row, after the step's files were written; every
    retry wrote them again and re-raised, so the step never left 0."""
    root = str(tmp_path / ".art")
    reporter = WandbReporter(root, mode="offline", settings=OFFLINE_SETTINGS)
    model = model_with(root, reporter)
    calls = failing_init(monkeypatch, 1)
    run_dir = tmp_path / ".art" / RUN.project / "models" / RUN.name

    async def go() -> int:
        await model.register(InMemoryBackend())
        written = {p.name for p in run_dir.rglob("*") if p.is_file()}
        with pytest.raises(WandbUnavailableError, match="injected"):
            await model.train([make_group((0.0, 1.0))])
        assert {p.name for p in run_dir.rglob("*") if p.is_file()} <= written | {RUN_RECORD}
        assert not (run_dir / "history.jsonl").exists()
        result = await model.train([make_group((0.0, 1.0))])  # the retry starts wandb
        await model.close()
        return result.step

    assert asyncio.run(go()) == 1
    assert len(calls) == 2
    history = list(asyncio.run(JsonlHistory(root).rows(RUN)))
    assert [row.step for row in history] == [0, 1]
    assert asyncio.run(ParquetTrajectoryStore(root).steps(RUN, "train")) == [0]
    assert len(list((run_dir / "trajectories" / "train").glob("*.parquet"))) == 1
    (found,) = offline_runs(reporter, RUN)
    assert [row.step for row in found.rows()] == [0, 1]


def test_a_failing_init_mid_run_warns_once_and_training_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """After a `close`, the next row re-opens the run lazily: a failure there (mid-run) turns
    the mirror off with one warning, never fails the training call."""
    root = str(tmp_path / ".art")
    reporter = WandbReporter(root, mode="offline", settings=OFFLINE_SETTINGS)
    model = model_with(root, reporter)

    async def go() -> int:
        await model.register(InMemoryBackend())
        await model.train([make_group((0.0, 1.0))])
        await reporter.close()  # e.g. a notebook closed the mirror between cells
        failing_init(monkeypatch, 10)
        result = await model.train([make_group((0.0, 1.0))])
        await model.close()
        return result.step

    with caplog.at_level(logging.WARNING, logger="arthex.wandb"):
        assert asyncio.run(go()) == 2
    (warning,) = wandb_warnings(caplog)
    assert "injected" in warning.getMessage()
    assert reporter.quiet
    assert [row.step for row in asyncio.run(JsonlHistory(root).rows(RUN))] == [0, 1, 1, 2]
