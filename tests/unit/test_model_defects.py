"""Regression tests for defects found by an audit of `Model`/`TrainableModel` (each failed on
the code before its fix)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import arthex
from arthex.adapters.jsonl_history import JsonlHistory
from arthex.core.errors import InvalidInputError, UnsupportedCapability
from arthex.core.training_row import SUPERSEDED_KEY, trained_rows
from arthex.ports.training_backend import BackendCapabilities
from arthex.testing.builders import make_group, synthetic_groups
from arthex.testing.fakes.backend import InMemoryBackend

RUN = arthex.RunRef("p", "m")


def trainable(base: Path, **ports: Any) -> arthex.TrainableModel:
    return arthex.TrainableModel(
        name="m", project="p", base_model="tiny", base_path=str(base), report_metrics=[], **ports
    )


def train_parts(base: Path) -> list[str]:
    """The data files of the train split (the hidden `.lock` beside them is not one)."""
    folder = base / "p" / "models" / "m" / "trajectories" / "train"
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def files_under(base: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()
    }


def rows(base: Path) -> list[arthex.MetricsRow]:
    return list(asyncio.run(JsonlHistory(str(base)).rows(RUN)))


# -- 3. a refused call writes nothing -----------------------------------------------------


def test_a_loss_the_backend_lacks_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    async def go() -> tuple[dict[str, bytes], dict[str, bytes], int]:
        model = trainable(tmp_path)
        backend = InMemoryBackend(losses=("cispo",))
        await model.register(backend)
        before = files_under(tmp_path)
        with pytest.raises(UnsupportedCapability, match="loss:ppo"):
            await model.train(synthetic_groups(), config=arthex.TrainConfig(loss_fn="ppo"))
        with pytest.raises(UnsupportedCapability, match="kl_penalty"):
            await model.train(synthetic_groups(), config=arthex.TrainConfig(kl_penalty_coef=0.1))
        return before, files_under(tmp_path), await model.get_step()

    before, after, step = asyncio.run(go())
    assert after == before
    assert step == 0


def test_the_capability_check_is_one_typed_call() -> None:
    caps = BackendCapabilities({"loss:cispo"})
    caps.check(arthex.TrainConfig(), "B")
    with pytest.raises(UnsupportedCapability, match="B does not support 'loss:ppo'"):
        caps.check(arthex.TrainConfig(loss_fn="ppo"), "B")
    with pytest.raises(UnsupportedCapability, match="'kl_penalty'"):
        caps.check(arthex.TrainConfig(kl_penalty_coef=0.5), "B")


# -- 4. NaN rewards through the back door -------------------------------------------------


@pytest.mark.parametrize("how", ["model_copy", "model_construct"])
@pytest.mark.parametrize("call", ["log", "train"])
def test_a_nan_reward_that_skipped_validation_is_refused(
    tmp_path: Path, how: str, call: str
) -> None:
    groups = synthetic_groups()
    good = groups[0].trajectories[0]
    if how == "model_copy":
        bad = good.model_copy(update={"reward": math.nan})
    else:
        bad = arthex.Trajectory.model_construct(**{**dict(good), "reward": math.nan})
    groups[0].trajectories[0] = bad

    async def go() -> dict[str, bytes]:
        model = trainable(tmp_path)
        backend = InMemoryBackend()
        await model.register(backend)
        before = files_under(tmp_path)
        entry = model.log(groups, split="val") if call == "log" else model.train(groups)
        with pytest.raises(InvalidInputError, match="group 0, trajectory 0 has reward nan"):
            await entry
        assert files_under(tmp_path) == before
        assert backend.weights(model.run) == {}
        return before

    asyncio.run(go())


def test_a_nan_logprob_is_refused_before_training(tmp_path: Path) -> None:
    groups = synthetic_groups()
    choice = next(groups[0].trajectories[0].choices())
    assert choice.logprobs is not None and choice.logprobs.content
    choice.logprobs.content[1].logprob = math.nan

    async def go() -> None:
        model = trainable(tmp_path)
        await model.register(InMemoryBackend())
        with pytest.raises(InvalidInputError, match="token 1 has logprob nan"):
            await model.train(groups)

    asyncio.run(go())
    assert rows(tmp_path) == []


# -- 7. a no-op step records the gradient steps that happened -----------------------------


def test_a_step_with_nothing_to_train_records_zero_gradient_steps(tmp_path: Path) -> None:
    async def go() -> tuple[float | None, float | None]:
        model = trainable(tmp_path)
        await model.register(InMemoryBackend())
        flat = await model.train(synthetic_groups(equal=True))
        trained = await model.train(synthetic_groups(n_groups=3))
        return (
            flat.metrics["data/step_num_gradient_steps"],
            trained.metrics["data/step_num_gradient_steps"],
        )

    flat, trained = asyncio.run(go())
    assert flat == 0.0
    assert trained == 3.0  # the fake takes one optimizer step per trainable group
    training_rows = [r for r in rows(tmp_path) if "loss/train" in r.values]
    assert [r.values["data/step_num_gradient_steps"] for r in training_rows] == [0.0, 3.0]
    assert [r.values["data/cum/num_gradient_steps"] for r in training_rows] == [0.0, 3.0]


# -- 8. user metrics cannot clobber computed keys ----------------------------------------


def test_a_trajectory_metric_named_reward_cannot_replace_the_computed_reward(
    tmp_path: Path,
) -> None:
    group = make_group((1.0, 0.0))
    for trajectory in group.trajectories:
        trajectory.metrics["reward"] = 7.0

    async def go() -> None:
        model = arthex.Model(name="m", project="p", base_path=str(tmp_path), report_metrics=[])
        with pytest.raises(InvalidInputError, match="'val/reward'"):
            await model.log([group], split="val")
        with pytest.raises(InvalidInputError, match="caller metric 'val/reward'"):
            await model.log([make_group((1.0, 0.0))], split="val", metrics={"reward": 3.0})

    asyncio.run(go())
    assert files_under(tmp_path) == {}


def test_caller_and_trajectory_section_keys_are_filed_alike(tmp_path: Path) -> None:
    group = make_group((1.0, 0.0))
    for trajectory in group.trajectories:
        trajectory.metrics["data/x"] = 2.0

    async def go() -> None:
        model = arthex.Model(name="m", project="p", base_path=str(tmp_path), report_metrics=[])
        await model.log([group], split="val")
        await model.log(split="val", metrics={"data/y": 3.0})

    asyncio.run(go())
    first, second = rows(tmp_path)
    assert first.values["data/x"] == 2.0 and "val/data/x" not in first.values
    assert second.values["data/y"] == 3.0


# -- ART's running totals come from the shared ledger --------------------------------------


def test_running_totals_count_every_train_batch_in_the_ledger(tmp_path: Path) -> None:
    async def go() -> None:
        model = trainable(tmp_path)
        await model.register(InMemoryBackend())
        await model.train(synthetic_groups(n_groups=2))
        await model.train(synthetic_groups(n_groups=3))

    asyncio.run(go())
    batches = [r for r in rows(tmp_path) if "train/reward" in r.values]
    assert [r.values["data/step_num_scenarios"] for r in batches] == [2.0, 3.0]
    assert [r.values["data/cum/num_scenarios"] for r in batches] == [2.0, 5.0]
    assert [r.values["data/cum/num_trajectories"] for r in batches] == [8.0, 20.0]
    training = [r for r in rows(tmp_path) if "loss/train" in r.values]
    assert all("data/step_num_groups_trainable" not in r.values for r in training)
    assert all(r.values["time/step_backend_train_s"] is not None for r in training)


# -- 5. a retried train after a failure writes nothing twice ------------------------------


class FailingOnce(InMemoryBackend):
    """Fails its first `train` after the model has written the step's batch."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    async def train_steps(
        self,
        run: arthex.RunRef,
        groups: Sequence[arthex.TrajectoryGroup],
        config: arthex.TrainConfig,
    ) -> AsyncIterator[Mapping[str, float]]:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("injected: the trainer went away")
        async for sample in super().train_steps(run, groups, config):
            yield sample


class FailingHistory(JsonlHistory):
    """Fails its first append of a training row (the batch row goes through)."""

    failures = 1

    async def report(self, run: arthex.RunRef, row: arthex.MetricsRow) -> None:
        if "loss/train" not in row.values and self.failures:
            self.failures -= 1
            raise OSError("injected: disk hiccup")
        await super().report(run, row)


def test_a_retried_train_after_a_backend_failure_writes_no_duplicate_rows_or_parts(
    tmp_path: Path,
) -> None:
    groups = synthetic_groups()

    async def go() -> int:
        model = trainable(tmp_path)
        await model.register(FailingOnce())
        with pytest.raises(ConnectionError, match="injected"):
            await model.train(groups)
        copies = [group.model_copy(deep=True) for group in groups]  # equal groups: a retry
        return (await model.train(copies)).step

    assert asyncio.run(go()) == 1
    assert [r.step for r in rows(tmp_path)] == [0, 1]
    assert train_parts(tmp_path) == ["0000.parquet"]


def test_a_retry_after_the_batch_row_failed_writes_the_part_once(tmp_path: Path) -> None:
    groups = synthetic_groups()

    async def go() -> int:
        model = trainable(tmp_path, reporter=FailingHistory(str(tmp_path)))
        await model.register(InMemoryBackend())
        with pytest.raises(OSError, match="disk hiccup"):
            await model.train(groups)
        return (await model.train(groups)).step

    assert asyncio.run(go()) == 1
    assert [r.step for r in rows(tmp_path)] == [0, 1]
    assert train_parts(tmp_path) == ["0000.parquet"]


def test_new_groups_at_the_same_step_after_a_failure_are_a_new_batch(tmp_path: Path) -> None:
    async def go() -> None:
        model = trainable(tmp_path)
        await model.register(FailingOnce())
        with pytest.raises(ConnectionError):
            await model.train(synthetic_groups())
        await model.train(synthetic_groups(offset=5))  # other rollouts: logged as well

    asyncio.run(go())
    # the failed attempt's row stays in the file, retired by the marker before the new batch
    assert [r.step for r in rows(tmp_path)] == [0, 0, 0, 1]
    assert rows(tmp_path)[1].values == {SUPERSEDED_KEY: 1.0}
    assert [r.step for r in trained_rows(rows(tmp_path))] == [0, 0, 1]
