"""The API used the way ART users use it, then the files checked on disk."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import arthex
from arthex.core.errors import InvalidInputError, InvalidNameError, NotRegisteredError
from arthex.testing.builders import synthetic_groups
from arthex.testing.fakes.backend import InMemoryBackend
from arthex.testing.fakes.history import InMemoryHistory


def trainable(base: Path, **ports: Any) -> arthex.TrainableModel:
    """The model most scenarios use: `p/m` under `base`, no mirrors."""
    return arthex.TrainableModel(
        name="m", project="p", base_model="tiny", base_path=str(base), report_metrics=[], **ports
    )


def val_trajectories(reward: float) -> list[arthex.Trajectory]:
    return [
        arthex.Trajectory(
            messages_and_choices=[{"role": "user", "content": f"eval {i}"}],
            reward=reward,
            metrics={"correct": reward > 0.5},
        )
        for i in range(3)
    ]


async def art_style_loop(base: Path) -> tuple[arthex.RetentionDecision, list[int]]:
    backend = InMemoryBackend()
    model = arthex.TrainableModel(
        name="agent-001",
        project="support-bot",
        base_model="tiny",
        base_path=str(base),
        report_metrics=[],
    )
    await model.register(backend)
    for step, val_reward in enumerate([0.2, 0.9, 0.4]):
        assert await model.get_step() == step
        await model.log(val_trajectories(val_reward), split="val")
        if step < 2:
            result = await model.train(
                synthetic_groups(offset=step), config=arthex.TrainConfig(learning_rate=1e-2)
            )
            assert result.step == step + 1
            assert result.metrics["loss/learning_rate"] == pytest.approx(1e-2)
    decision = await model.delete_checkpoints(best_checkpoint_metric="val/reward")
    return decision, await backend.checkpoint_steps(model.run)


def test_log_train_delete_and_the_files_on_disk(tmp_path: Path) -> None:
    decision, remaining = asyncio.run(art_style_loop(tmp_path))
    run_dir = tmp_path / "support-bot" / "models" / "agent-001"

    # retention: latest (2) and the best val/reward step (1, reward 0.9) stay
    assert decision.best_step == 1
    assert remaining == [1, 2]
    assert decision.deleted == (0,)

    # trajectories: one parquet per (split, step), val at 0,1,2 and train at 0,1
    files = sorted(
        p.relative_to(run_dir / "trajectories").as_posix()
        for p in (run_dir / "trajectories").rglob("*.parquet")
    )
    assert files == [
        "train/0000.parquet",
        "train/0001.parquet",
        "val/0000.parquet",
        "val/0001.parquet",
        "val/0002.parquet",
    ]
    table = pq.read_table(run_dir / "trajectories" / "val" / "0001.parquet")
    assert table.column("reward").to_pylist() == [0.9, 0.9, 0.9]
    assert json.loads(run_dir.joinpath("model.json").read_text())["base_model"] == "tiny"

    # history: val rows at 0,1,2; train trajectory rows at 0,1; training rows at 1,2
    rows = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    keyed = [
        (row["step"], sorted(k for k in row if k.startswith(("val/", "train/", "loss/"))))
        for row in rows
    ]
    assert [step for step, _ in keyed] == [0, 0, 1, 1, 1, 2, 2]
    val_rows = [row for row in rows if "val/reward" in row]
    assert [r["step"] for r in val_rows] == [0, 1, 2]
    assert [r["val/reward"] for r in val_rows] == pytest.approx([0.2, 0.9, 0.4])
    assert all(r["val/correct"] in (0.0, 1.0) for r in val_rows)
    train_rows = [row for row in rows if "train/reward" in row]
    assert [r["step"] for r in train_rows] == [0, 1]
    assert all(r["data/step_num_groups_trainable"] == 2.0 for r in train_rows)
    loss_rows = [row for row in rows if "loss/train" in row]
    assert [r["step"] for r in loss_rows] == [1, 2]
    assert all("time/step_backend_train_s" in r for r in loss_rows)
    for row in rows:
        assert row["training_step"] == row["step"]
        assert row["recorded_at"].endswith("+00:00")


async def _retention_without_metric(base: Path) -> tuple[arthex.RetentionDecision, list[int]]:
    backend = InMemoryBackend()
    model = trainable(base)
    await model.register(backend)
    await model.train(synthetic_groups())
    decision = await model.delete_checkpoints("val/reward")
    return decision, await backend.checkpoint_steps(model.run)


def test_nothing_is_deleted_when_the_metric_was_never_logged(tmp_path: Path) -> None:
    decision, remaining = asyncio.run(_retention_without_metric(tmp_path))
    assert remaining == [0, 1]
    assert decision.deleted == ()
    assert "never logged" in decision.reason


async def _dry_run_then_min(
    base: Path,
) -> tuple[arthex.RetentionDecision, list[int], arthex.RetentionDecision]:
    backend = InMemoryBackend()
    model = trainable(base)
    await model.register(backend)
    for step in range(3):
        await model.train(synthetic_groups(offset=step))
        await model.log(metrics={"loss": [0.5, 0.1, 0.3][step]}, split="val")
    dry = await model.delete_checkpoints("val/loss", direction="min", dry_run=True)
    after_dry = await backend.checkpoint_steps(model.run)
    real = await model.delete_checkpoints("val/loss", direction="min", pinned=[0])
    return dry, after_dry, real


def test_dry_run_reports_without_deleting_and_min_direction(tmp_path: Path) -> None:
    dry, after_dry, real = asyncio.run(_dry_run_then_min(tmp_path))
    assert after_dry == [0, 1, 2, 3]
    assert dry.dry_run
    # val/loss logged at steps 1,2,3 with 0.5, 0.1, 0.3 -> best (min) is step 2
    assert dry.best_step == 2
    assert dry.deleted == (0, 1)
    assert real.best_step == 2
    assert real.kept == (0, 2, 3)
    assert real.deleted == (1,)


async def _bad_inputs(base: Path) -> None:
    model = trainable(base)
    with pytest.raises(NotRegisteredError):
        await model.train(synthetic_groups())
    await model.register(InMemoryBackend())
    with pytest.raises(InvalidInputError, match="empty"):
        await model.train([])
    with pytest.raises(InvalidNameError):
        await model.log(val_trajectories(1.0), split="../escape")
    with pytest.raises(InvalidInputError, match="mix"):
        await model.log([synthetic_groups()[0], val_trajectories(1.0)[0]])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await model.log(metrics={"x": "not a number"})  # type: ignore[dict-item]
    with pytest.raises(InvalidInputError):
        await model.log(val_trajectories(1.0), step=-2)
    with pytest.raises(InvalidInputError):
        arthex.TrainConfig(learning_rate=-1.0)


def test_bad_input_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    asyncio.run(_bad_inputs(tmp_path))
    run_dir = tmp_path / "p" / "models" / "m"
    assert not (run_dir / "history.jsonl").exists()
    assert not (run_dir / "trajectories").exists()
    assert not (tmp_path / "escape").exists()
    with pytest.raises(InvalidNameError):
        arthex.Model(name="../x", project="p", base_path=str(tmp_path), report_metrics=[])


async def _lr_policy(base: Path) -> list[float]:
    backend = InMemoryBackend()
    model = trainable(base)
    await model.register(backend)
    config = arthex.TrainConfig(learning_rate=1e-2, scale_learning_rate_by_reward_std_dev=True)
    rates = []
    for step in range(4):
        groups = synthetic_groups(offset=step)
        for group in groups:  # shrink the spread each step
            for t in group.trajectories:
                t.reward = t.reward / (step + 1)
        result = await model.train(groups, config=config)
        rates.append(float(result.metrics["loss/learning_rate"] or 0.0))
    return rates


def test_lr_policy_scales_the_learning_rate_as_the_spread_shrinks(tmp_path: Path) -> None:
    rates = asyncio.run(_lr_policy(tmp_path))
    assert rates[0] == pytest.approx(1e-2)  # one step of history: multiplier 1
    assert rates[1] < rates[0]
    assert rates[3] < rates[2] < rates[1]
    assert min(rates) >= 1e-3  # clamped at 0.1x


class FailingOnceHistory(InMemoryHistory):
    """A ledger whose next training-row append fails, as a crash after the checkpoint would."""

    armed = True

    async def report(self, run: arthex.RunRef, row: arthex.MetricsRow) -> None:
        if self.armed and "data/step_num_gradient_steps" in row.values:
            self.armed = False
            raise OSError(28, "No space left on device")
        await super().report(run, row)


async def _lost_training_row(base: Path) -> tuple[list[arthex.MetricsRow], int]:
    backend, history = InMemoryBackend(), FailingOnceHistory()
    model = trainable(base, history=history)
    await model.register(backend)
    with pytest.raises(OSError, match="No space"):
        await model.train(synthetic_groups())
    assert await backend.get_step(model.run) == 1  # the update itself is durable
    # a restarted process registers again: the lost row of step 1 is rebuilt
    again = trainable(base, history=history)
    await again.register(backend)
    await again.register(backend)  # and only once
    await again.train(synthetic_groups(offset=1))
    return list(await history.rows(model.run)), await backend.get_step(model.run)


def test_a_lost_training_row_is_rebuilt_from_the_checkpoint(tmp_path: Path) -> None:
    rows, step = asyncio.run(_lost_training_row(tmp_path))
    assert step == 2
    training = [r for r in rows if "data/step_num_gradient_steps" in r.values]
    assert [r.step for r in training] == [1, 2]
    rebuilt = training[0]
    assert rebuilt.values["loss/learning_rate"] == pytest.approx(5e-6)
    assert rebuilt.values["time/step_backend_train_s"] is None  # not kept with the checkpoint


def test_train_shows_a_line_per_gradient_step_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def main() -> None:
        model = trainable(tmp_path)
        await model.register(InMemoryBackend())
        await model.train(synthetic_groups(n_groups=3), progress=True)
        await model.train(synthetic_groups(), progress=False)

    asyncio.run(main())
    err = capsys.readouterr().err
    assert "train step 0 -> 1: gradient step 3" in err
    assert "train step 1 -> 2" not in err
