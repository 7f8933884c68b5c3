"""Policies see every row of the ledger, whoever appended it (BEHAVIOUR.md, many actors).

The evaluator here is a second model object on the same run directory: to the trainer it is
indistinguishable from another process (nothing is shared but the files). The multi-process
version of this lives in tests/faults/test_shared_ledger_processes.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import arthex
from arthex.adapters.jsonl_history import JsonlHistory
from arthex.testing.builders import make_group
from arthex.testing.fakes.backend import InMemoryBackend


def trainer(base: Path) -> arthex.TrainableModel:
    return arthex.TrainableModel(
        name="m", project="p", base_model="tiny", base_path=str(base), report_metrics=[]
    )


def evaluator(base: Path) -> arthex.Model:
    return arthex.Model(name="m", project="p", base_path=str(base), report_metrics=[])


async def train_to(model: arthex.TrainableModel, step: int) -> None:
    while await model.get_step() < step:
        await model.train([make_group((0.0, 1.0))])


def test_a_best_step_logged_by_another_writer_is_kept(tmp_path: Path) -> None:
    """The defect: the index was built once and fed only the model's own rows, so a best
    val/reward appended by an evaluator was invisible and its checkpoint deleted."""

    async def go() -> tuple[int | None, tuple[int, ...], list[int]]:
        backend = InMemoryBackend()
        model = trainer(tmp_path)
        await model.register(backend)
        await train_to(model, 2)
        await model.log(metrics={"reward": 0.5}, split="val")  # own eval at step 2
        first = await model.delete_checkpoints()  # builds the index: best is 2
        assert first.best_step == 2
        await train_to(model, 3)
        other = evaluator(tmp_path)
        await other.log(metrics={"reward": 0.95}, split="val", step=3)
        await train_to(model, 5)
        decision = await model.delete_checkpoints()
        return decision.best_step, decision.deleted, await backend.checkpoint_steps(model.run)

    best, deleted, remaining = asyncio.run(go())
    # the oracle: a fresh reader of the ledger picks step 3
    rows = asyncio.run(JsonlHistory(str(tmp_path)).rows(arthex.RunRef("p", "m")))
    val = {row.step: row.values["val/reward"] for row in rows if "val/reward" in row.values}
    assert max(val, key=lambda s: val[s] or 0.0) == 3
    assert best == 3
    assert 3 not in deleted
    assert remaining == [3, 5]


def test_the_learning_rate_multiplier_sees_rows_appended_by_another_writer(
    tmp_path: Path,
) -> None:
    """The reward-std-dev fit includes `train/reward_std_dev` rows another writer appended."""

    async def go() -> list[float]:
        model = trainer(tmp_path)
        await model.register(InMemoryBackend())
        config = arthex.TrainConfig(scale_learning_rate_by_reward_std_dev=True)
        seen = []
        result = await model.train([make_group((0.0, 1.0))], config=config)
        seen.append(result.metrics["loss/learning_rate_multiplier"])
        # std 0.5 at steps 0 and (now) an outside row of std 0.0 at step 1: the fit falls
        await evaluator(tmp_path).log(metrics={"reward_std_dev": 0.0}, split="train", step=1)
        result = await model.train([make_group((0.0, 1.0))], config=config)
        seen.append(result.metrics["loss/learning_rate_multiplier"])
        return [float(m or 0.0) for m in seen]

    first, second = asyncio.run(go())
    assert first == 1.0  # one step: no fit yet
    # per-step means: step 0: 0.5; step 1: mean(0.0, 0.5) = 0.25 -> line 0.5 - 0.25 s, at s=1
    # 0.25 / 0.5
    assert second == pytest.approx(0.5)


def test_a_ledger_cut_short_behind_the_model_is_read_again(tmp_path: Path) -> None:
    async def go() -> int | None:
        model = trainer(tmp_path)
        await model.register(InMemoryBackend())
        await train_to(model, 3)
        for step, reward in ((1, 0.9), (2, 0.1)):
            await model.log(metrics={"reward": reward}, split="val", step=step)
        assert (await model.delete_checkpoints(dry_run=True)).best_step == 1
        path = JsonlHistory(str(tmp_path)).path(model.run)
        path.write_text("")  # someone truncated the ledger
        await model.log(metrics={"reward": 0.5}, split="val", step=2)
        return (await model.delete_checkpoints(dry_run=True)).best_step

    assert asyncio.run(go()) == 2


def ledger_means(base: Path, key: str) -> dict[int, float]:
    rows = asyncio.run(JsonlHistory(str(base)).rows(arthex.RunRef("p", "m")))
    sums: dict[int, list[float]] = {}
    for row in rows:
        value = row.values.get(key)
        if value is not None:
            sums.setdefault(row.step, []).append(value)
    return {step: sum(v) / len(v) for step, v in sums.items()}


def numpy_multiplier(points: dict[int, float]) -> float:
    import numpy as np

    steps = sorted(points)
    slope, intercept = np.polyfit(steps, [points[s] for s in steps], 1)
    return float((slope * steps[-1] + intercept) / intercept)


FALLING = (1.0, 1.0, 0.9, 0.3, 0.2, 0.1)  # steeply at the end
RISING = (0.1, 0.2, 0.3, 0.9, 1.0, 1.0)


@pytest.mark.parametrize(
    ("spreads", "window", "low", "high"),
    [
        (FALLING, None, 0.1, 10.0),
        (FALLING, 3, 0.1, 10.0),
        (FALLING, 3, 0.5, 10.0),
        (RISING, None, 0.1, 1.5),
    ],
)
def test_train_scales_the_learning_rate_by_the_windowed_clamped_fit(
    tmp_path: Path, spreads: tuple[float, ...], window: int | None, low: float, high: float
) -> None:
    """Through `TrainableModel.train`: the multiplier and the learning rate the backend gets
    match numpy's fit of the ledger's per-step means (last `window` steps), clamped."""

    async def go() -> arthex.TrainResult:
        other = evaluator(tmp_path)
        for step, spread in enumerate(spreads):
            await other.log(metrics={"reward_std_dev": spread}, split="train", step=step)
        model = trainer(tmp_path)
        await model.register(InMemoryBackend())
        config = arthex.TrainConfig(
            learning_rate=1e-3,
            scale_learning_rate_by_reward_std_dev=True,
            lr_multiplier_window=window,
            min_lr_multiplier=low,
            max_lr_multiplier=high,
        )
        return await model.train([make_group((0.0, 1.0))], config=config)

    result = asyncio.run(go())
    means = ledger_means(tmp_path, "train/reward_std_dev")  # the train row at 0 is in it
    recent = sorted(means)[-window:] if window else sorted(means)
    unclamped = numpy_multiplier({s: means[s] for s in recent})
    expected = min(max(unclamped, low), high)
    assert result.metrics["loss/learning_rate_multiplier"] == pytest.approx(expected, rel=1e-9)
    assert result.metrics["loss/learning_rate"] == pytest.approx(1e-3 * expected, rel=1e-9)
    if low == 0.5:
        assert unclamped < low  # the lower bound really acted
    if high == 1.5:
        assert unclamped > high  # the upper bound really acted
    if window is not None:  # and the window changed the answer
        assert numpy_multiplier(means) != pytest.approx(unclamped)
