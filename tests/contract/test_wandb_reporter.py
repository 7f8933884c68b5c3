"""WandbReporter on the real wandb SDK in offline mode, read back from the offline run files.

Nothing here touches the network: every run is offline, git/code/stats capture is off, and the
SDK's config, cache and data folders point into a temporary directory. The SDK's service
process is torn down when the module ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from arthex.adapters.wandb_reporter import RUN_RECORD, WandbReporter, WandbUnavailableError
from arthex.core.errors import CorruptDataError, InvalidInputError, MissingExtraError
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow
from arthex.ports.metrics_reporter import MetricsReporter
from arthex.testing.builders import make_group
from arthex.testing.contracts.metrics import MetricsReporterContract
from arthex.testing.wandb_offline import (
    OfflineRun,
    finished_runs,
    offline_run_dirs,
    read_offline_run,
    sandbox_environment,
)

wandb = pytest.importorskip("wandb")

# Keep offline inits quick and local: no system stats sampler, no git or code capture.
OFFLINE_SETTINGS: Mapping[str, Any] = {
    "x_disable_stats": True,
    "x_disable_machine_info": True,
    "disable_git": True,
    "disable_code": True,
    "silent": True,
}
RUN = RunRef("proj", "model-a")


@pytest.fixture(scope="module", autouse=True)
def offline_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    home = tmp_path_factory.mktemp("wandb-home")
    patch = pytest.MonkeyPatch()
    sandbox_environment(patch, home, offline=False)  # the reporter says offline itself
    yield
    wandb.teardown()  # stops the SDK's service process
    patch.undo()


def offline(root: Path, **kwargs: Any) -> WandbReporter:
    settings = {**OFFLINE_SETTINGS, **kwargs.pop("settings", {})}
    return WandbReporter(str(root), mode="offline", settings=settings, **kwargs)


def offline_runs(reporter: WandbReporter, run: RunRef) -> list[OfflineRun]:
    return finished_runs(reporter.record_path(run).parent)


def report(reporter: WandbReporter, run: RunRef, *rows: MetricsRow, close: bool = True) -> None:
    async def go() -> None:
        for row in rows:
            await reporter.report(run, row)
        if close:
            await reporter.close()

    asyncio.run(go())


class TestWandbReporter(MetricsReporterContract):
    @pytest.fixture
    def reporter(self, tmp_path: Path) -> MetricsReporter:
        return offline(tmp_path)

    def read_back(self, reporter: MetricsReporter, run: RunRef) -> list[MetricsRow] | None:
        assert isinstance(reporter, WandbReporter)
        return [row for found in offline_runs(reporter, run) for row in found.rows()]


def test_every_row_is_charted_against_training_step(tmp_path: Path) -> None:
    reporter = offline(tmp_path)
    report(
        reporter,
        RUN,
        MetricsRow(step=2, values={"train/reward": 0.5, "loss/train": 1.25}),
        MetricsRow(step=3, values={"train/reward": 0.75, "custom": 7.0}),
        MetricsRow(step=1, values={"val/reward": 0.25, "val/skipped": None}),  # a late eval
    )
    (found,) = offline_runs(reporter, RUN)
    ours = [{k: v for k, v in item.items() if not k.startswith("_")} for item in found.history]
    assert ours == [
        {"training_step": 2, "train/reward": 0.5, "loss/train": 1.25},
        {"training_step": 3, "train/reward": 0.75, "custom": 7.0},
        {"training_step": 1, "val/reward": 0.25},
    ]
    # No step= from us: wandb's own step only moves forward, so the late eval is not dropped.
    assert [item["_step"] for item in found.history] == [0, 1, 2]
    axes = {(m["name"] or m["glob_name"]): m["step_metric"] for m in found.metrics}
    assert axes["training_step"] == ""
    for key in ("*", "train/*", "loss/*", "val/*", "custom"):
        assert axes[key] == "training_step", key


def test_sft_rows_are_charted_against_the_gradient_step_as_art_does(tmp_path: Path) -> None:
    reporter = offline(tmp_path)
    rows = [
        MetricsRow(step=1, values={"sft/gradient_step": float(g), "sft/loss/train": 2.0 / g})
        for g in (1, 2)
    ]
    report(reporter, RUN, *rows, MetricsRow(step=1, values={"loss/train": 1.5}))
    (found,) = offline_runs(reporter, RUN)
    axes = {(m["name"] or m["glob_name"]): m["step_metric"] for m in found.metrics}
    assert axes["sft/gradient_step"] == ""
    assert axes["sft/*"] == "sft/gradient_step"
    assert axes["loss/*"] == "training_step"
    assert [item.get("sft/loss/train") for item in found.history] == [2.0, 1.0, None]


def test_one_run_per_model_across_calls_and_closes(tmp_path: Path) -> None:
    reporter = offline(tmp_path)
    report(reporter, RUN, MetricsRow(step=0, values={"val/reward": 0.0}))
    assert not reporter.resumed(RUN)
    report(reporter, RUN, MetricsRow(step=1, values={"val/reward": 1.0}))
    assert reporter.resumed(RUN)
    record = json.loads(reporter.record_path(RUN).read_text())
    first, second = offline_runs(reporter, RUN)
    assert first.run_id == second.run_id == record["run_id"]
    assert first.resume  # every init asks to resume (resume="allow")
    assert second.resume
    assert [row.values for row in first.rows() + second.rows()] == [
        {"val/reward": 0.0},
        {"val/reward": 1.0},
    ]
    assert first.path.parent == reporter.record_path(RUN).parent / "wandb"


def test_separate_models_get_separate_runs(tmp_path: Path) -> None:
    other = RunRef("proj", "model-b")
    reporter = offline(tmp_path)

    async def go() -> None:
        await reporter.report(RUN, MetricsRow(step=0, values={"val/reward": 1.0}))
        await reporter.report(other, MetricsRow(step=0, values={"val/reward": 2.0}))
        await reporter.report(RUN, MetricsRow(step=1, values={"val/reward": 3.0}))
        await reporter.close()

    asyncio.run(go())
    (mine,) = offline_runs(reporter, RUN)
    (theirs,) = offline_runs(reporter, other)
    assert mine.run_id != theirs.run_id
    assert [row.values["val/reward"] for row in mine.rows()] == [1.0, 3.0]
    assert [row.values["val/reward"] for row in theirs.rows()] == [2.0]


def test_config_is_deep_merged_before_and_after_init(tmp_path: Path) -> None:
    reporter = offline(tmp_path, config={"launcher": {"host": "a"}})
    reporter.update_config(RUN, {"model": {"name": "model-a", "base_model": "tiny"}})

    async def go() -> None:
        await reporter.report(RUN, MetricsRow(step=0, values={"val/reward": 1.0}))
        reporter.update_config(RUN, {"train": {"learning_rate": 1e-5}})
        reporter.update_config(RUN, {"model": {"trainable": True}, "launcher": {"gpus": 2}})
        await reporter.close()

    asyncio.run(go())
    (found,) = offline_runs(reporter, RUN)
    assert found.config["model"] == {"name": "model-a", "base_model": "tiny", "trainable": True}
    assert found.config["train"] == {"learning_rate": 1e-5}
    assert found.config["launcher"] == {"host": "a", "gpus": 2}


def test_corrupt_record_warns_once_starts_fresh_and_is_rewritten(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reporter = offline(tmp_path)
    path = reporter.record_path(RUN)
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"run_id": "half-writ')
    with caplog.at_level(logging.WARNING, logger="arthex.wandb"):
        report(reporter, RUN, MetricsRow(step=0, values={"val/reward": 1.0}))
    warnings = [r for r in caplog.records if r.name == "arthex.wandb"]
    assert len(warnings) == 1
    assert RUN_RECORD in warnings[0].getMessage()
    record = json.loads(path.read_text())
    (found,) = offline_runs(reporter, RUN)
    assert found.run_id == record["run_id"]
    assert not reporter.resumed(RUN)
    assert not reporter.quiet


def test_sample_tables_hold_at_most_n_trajectories_one_group_each_first(tmp_path: Path) -> None:
    reporter = offline(tmp_path, sample_tables=2)
    groups = [make_group((0.0, 1.0), prompt=f"question {i}") for i in range(3)]

    async def go() -> None:
        await reporter.report_samples(RUN, "val", 4, groups)
        await reporter.report(RUN, MetricsRow(step=4, values={"val/reward": 0.5}))
        await reporter.close()

    asyncio.run(go())
    (found,) = offline_runs(reporter, RUN)
    samples = found.history[0]
    assert samples["training_step"] == 4
    assert samples["val/samples"]["_type"] == "table-file"
    table = json.loads((found.path / "files" / samples["val/samples"]["path"]).read_text())
    assert table["columns"] == ["group_index", "trajectory_index", "reward", "messages", "metrics"]
    assert [row[:3] for row in table["data"]] == [[0, 0, 0.0], [1, 0, 0.0]]
    assert "question 1" in table["data"][1][3]
    assert found.rows()[1].values == {"val/reward": 0.5}


def test_samples_are_off_by_default(tmp_path: Path) -> None:
    reporter = offline(tmp_path)

    async def go() -> None:
        await reporter.report_samples(RUN, "val", 0, [make_group()])
        await reporter.close()

    asyncio.run(go())
    assert not reporter.record_path(RUN).parent.exists()  # not even a run was started


def test_disabled_mode_writes_nothing(tmp_path: Path) -> None:
    reporter = WandbReporter(str(tmp_path), mode="disabled")
    reporter.check_ready()
    report(reporter, RUN, MetricsRow(step=0, values={"val/reward": 1.0}))
    assert list(tmp_path.iterdir()) == []


def test_explicit_dir_holds_the_offline_run(tmp_path: Path) -> None:
    reporter = offline(tmp_path / "art", dir=str(tmp_path / "wandb-files"))
    report(reporter, RUN, MetricsRow(step=0, values={"val/reward": 1.0}))
    (path,) = offline_run_dirs(tmp_path / "wandb-files")
    found = read_offline_run(path, wait=10)
    assert found.run_id == json.loads(reporter.record_path(RUN).read_text())["run_id"]
    assert [row.values for row in found.rows()] == [{"val/reward": 1.0}]
    assert not (reporter.record_path(RUN).parent / "wandb").exists()


# -- readiness: instant, no run started --------------------------------------------------------


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL", "WANDB_MODE"):
        monkeypatch.delenv(name, raising=False)
    netrc = tmp_path / "netrc"
    monkeypatch.setenv("NETRC", str(netrc))
    return netrc


def test_online_without_credentials_fails_with_what_to_do(no_credentials: Path) -> None:
    reporter = WandbReporter(str(no_credentials.parent))
    with pytest.raises(WandbUnavailableError, match=r"WANDB_API_KEY.*WANDB_MODE=offline"):
        reporter.check_ready()
    with pytest.raises(WandbUnavailableError):
        asyncio.run(reporter.start(RUN))
    assert not reporter.record_path(RUN).exists()


def test_credentials_come_from_the_env_or_a_netrc_login(
    no_credentials: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reporter = WandbReporter(str(no_credentials.parent))
    no_credentials.write_text("machine example.com login u password p\n")
    with pytest.raises(WandbUnavailableError):
        reporter.check_ready()
    no_credentials.write_text("machine api.wandb.ai login user password " + "k" * 40 + "\n")
    reporter.check_ready()
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.com")
    with pytest.raises(WandbUnavailableError):  # a login for another server does not count
        reporter.check_ready()
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    reporter.check_ready()


def test_offline_and_disabled_need_no_credentials(
    no_credentials: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    WandbReporter(str(no_credentials.parent), mode="offline").check_ready()
    WandbReporter(str(no_credentials.parent), mode="disabled").check_ready()
    monkeypatch.setenv("WANDB_MODE", "offline")
    reporter = WandbReporter(str(no_credentials.parent))
    reporter.check_ready()
    assert reporter.mode() == "offline"


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # makes `import wandb` fail
    with pytest.raises(MissingExtraError, match=r"arthex\[wandb\]"):
        WandbReporter(str(tmp_path), mode="offline").check_ready()


def test_bad_arguments_are_refused_up_front(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="'ofline'"):
        WandbReporter(str(tmp_path), mode="ofline")
    with pytest.raises(InvalidInputError, match="sample_tables"):
        WandbReporter(str(tmp_path), sample_tables=-1)


def test_concurrent_first_reports_start_one_run(tmp_path: Path) -> None:
    reporter = offline(tmp_path)
    rows = [MetricsRow(step=step, values={"val/reward": float(step)}) for step in range(5)]

    async def go() -> None:
        await asyncio.gather(*(reporter.report(RUN, row) for row in rows))
        await reporter.close()

    asyncio.run(go())
    (found,) = offline_runs(reporter, RUN)
    assert sorted(row.step for row in found.rows()) == [0, 1, 2, 3, 4]


def test_reader_refuses_a_damaged_log_and_stops_at_a_torn_tail(tmp_path: Path) -> None:
    reporter = offline(tmp_path)
    report(reporter, RUN, MetricsRow(step=0, values={"val/reward": 1.0}))
    (found,) = offline_runs(reporter, RUN)
    (log,) = found.path.glob("run-*.wandb")
    data = log.read_bytes()
    log.write_bytes(data[:-3])  # the exit record torn off mid-write
    torn = read_offline_run(found.path)
    assert not torn.finished
    assert [row.values for row in torn.rows()] == [{"val/reward": 1.0}]
    damaged = bytearray(data)
    damaged[data.index(found.run_id.encode())] ^= 0xFF  # inside a record's body
    log.write_bytes(bytes(damaged))
    with pytest.raises(CorruptDataError, match="checksum"):
        read_offline_run(found.path)
    log.write_bytes(b"not a log" + data)
    with pytest.raises(CorruptDataError, match="not a wandb transaction log"):
        read_offline_run(found.path)


def test_an_unwritable_model_dir_is_a_clear_start_error(tmp_path: Path) -> None:
    blocker = tmp_path / "proj"
    blocker.write_text("a file where the project directory should be")
    reporter = offline(tmp_path)
    with pytest.raises(WandbUnavailableError, match="cannot record the wandb run id"):
        asyncio.run(reporter.start(RUN))
    # after start (mid-run), the same failure only turns the mirror off
    report(reporter, RUN, MetricsRow(step=0, values={"val/reward": 1.0}))
    assert reporter.quiet
