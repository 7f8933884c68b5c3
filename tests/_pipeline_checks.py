"""What every pipeline test checks at the end of a run, through the ports (in memory or on
disk): each scenario of the stream trained exactly once or discarded, no trained group older
than the bound, steps contiguous in the trajectory store and the history.

The checks read what any reader sees (the train split, the history) and what the rollouts
themselves recorded (the step they were served, under `SERVED_KEY` in each trajectory's
metadata), not the pipeline's own bookkeeping; only the discards come from its record, the
one place that lists them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow
from arthex.core.pipeline import RolloutFn
from arthex.core.pipeline.measures import INITIAL_STEP_KEY, STREAM_INDEX_KEY
from arthex.core.pipeline_record import DISCARD_REASONS, PipelineRecord
from arthex.core.trainable import TrainableModel
from arthex.core.trajectories import Trajectory, TrajectoryGroup, trajectory_group
from arthex.ports.metrics_reporter import MetricsHistory
from arthex.ports.trajectory_store import PipelineStateStore, TrajectoryStore

SERVED_KEY = "served_step"
# The step at the end of a served name: `name@3` (Local, Tinker) or ART's serverless
# `wandb-artifact:///entity/project/run:step3`.
SERVED_STEP = re.compile(r"(?:@|:step)(\d+)$")
TRAINING_ROW_KEY = "data/step_num_gradient_steps"
PIPELINE_ROW_KEY = "discarded/cum/stale_groups"
UPDATE_ROW_KEY = "queue/groups_depth"  # on a pipeline row of an update, not on one of discards
SUMMARY_ROW_KEY = "data/step_num_scenarios"  # ART's count, on every train-split row


@attrs.frozen
class Outcome:
    trained: Counter[int]  # scenario -> times its group was stored under train
    discarded: set[int]
    steps: int
    record: PipelineRecord


async def check_pipeline_run(
    run: RunRef,
    *,
    store: TrajectoryStore,
    history: MetricsHistory,
    state: PipelineStateStore,
    steps: int,
    scenarios: int,
    bound: int | None,
    finished: bool = True,
) -> Outcome:
    """`steps` is the backend's step; `finished`: the stream was read to its end."""
    record = await state.load(run)
    assert record is not None
    assert record.step == steps and record.in_flight is None
    stored = await store.steps(run, "train")
    assert stored == list(range(steps)), f"train split steps {stored}, backend at {steps}"
    trained: Counter[int] = Counter()
    for step in stored:
        for group in await store.read(run, "train", step):
            index = group.metadata[STREAM_INDEX_KEY]
            sampled = group.metadata[INITIAL_STEP_KEY]
            assert isinstance(index, int) and isinstance(sampled, int)
            trained[index] += 1
            for trajectory in group.trajectories:
                served = trajectory.metadata[SERVED_KEY]
                assert isinstance(served, int) and served >= sampled, "sampled step overstated"
                if bound is not None:
                    assert step - served <= bound, (
                        f"scenario {index} sampled at step {served} trained at step {step}"
                    )
    twice = {i: n for i, n in trained.items() if n > 1}
    assert not twice, f"scenarios trained more than once: {twice}"
    discarded = {i for indices in record.discarded.values() for i in indices}
    assert not discarded & set(trained), f"trained and discarded: {discarded & set(trained)}"
    if finished:
        assert not record.pending
        assert set(trained) | discarded == set(range(scenarios)), (
            f"unaccounted: {sorted(set(range(scenarios)) - set(trained) - discarded)}"
        )
    else:
        untaken = set(range(record.offset, scenarios))
        accounted = set(trained) | discarded | set(record.pending) | untaken
        assert accounted == set(range(scenarios)), f"lost: {set(range(scenarios)) - accounted}"
    assert record.trained_groups == sum(trained.values())
    rows = await history.rows(run)

    def steps_with(key: str) -> list[int]:
        return sorted(r.step for r in rows if key in r.values)

    assert steps_with(TRAINING_ROW_KEY) == list(range(1, steps + 1))
    assert steps_with(UPDATE_ROW_KEY) == list(range(1, steps + 1))
    pipeline_rows = [r for r in rows if PIPELINE_ROW_KEY in r.values]
    tails = [r.step for r in pipeline_rows if UPDATE_ROW_KEY not in r.values]
    assert tails in ([], [steps]), f"rows of discards no update followed at steps {tails}"
    check_discard_ledger(pipeline_rows, record)
    assert steps_with(SUMMARY_ROW_KEY) == list(range(steps))
    return Outcome(trained=trained, discarded=discarded, steps=steps, record=record)


def check_discard_ledger(rows: Sequence[MetricsRow], record: PipelineRecord) -> None:
    """The history accounts for every discard the record lists: per reason, the pipeline rows'
    `discarded/step/*` add up to the record's count, and the last row's `discarded/cum/*` is it."""
    pipeline_rows = sorted(
        (r for r in rows if PIPELINE_ROW_KEY in r.values), key=lambda r: r.step
    )  # a stable sort: rows of one step keep the order they were written in
    for reason in DISCARD_REASONS:
        recorded = len(record.discarded[reason])
        summed = sum(r.values[f"discarded/step/{reason}_groups"] or 0 for r in pipeline_rows)
        last = pipeline_rows[-1].values[f"discarded/cum/{reason}_groups"] if pipeline_rows else 0
        assert (summed, last) == (recorded, recorded), (
            f"{reason}: the history's rows add up to {summed} discards and end at {last}, the "
            f"record lists {recorded}"
        )


async def check_run_files(
    base_path: Path, run: RunRef, *, steps: int, scenarios: int, bound: int | None
) -> Outcome:
    """`check_pipeline_run` on a run's files: parquet, history.jsonl, pipeline_state.json."""
    from arthex.adapters.jsonl_history import JsonlHistory
    from arthex.adapters.parquet.store import ParquetTrajectoryStore
    from arthex.adapters.run_files.pipeline import JsonPipelineStateStore

    root = str(base_path)
    return await check_pipeline_run(
        run,
        store=ParquetTrajectoryStore(root),
        history=JsonlHistory(root),
        state=JsonPipelineStateStore(root),
        steps=steps,
        scenarios=scenarios,
        bound=bound,
    )


def served_step(name: str) -> int:
    found = SERVED_STEP.search(name)
    assert found is not None, f"{name!r} names no step"
    return int(found.group(1))


def chat_rollout_fn(
    group_size: int = 2, max_tokens: int = 4
) -> RolloutFn[TrainableModel, Any, Any]:
    """Rollouts as users write them: chat completions with logprobs from the model's own
    endpoint, on the name `get_inference_name()` gives (its step kept under SERVED_KEY). The
    i-th rollout of a group earns i plus a little for digits, so every group trains."""

    async def single(model: TrainableModel, scenario: int, position: int) -> Trajectory:
        served = model.get_inference_name()
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"Question {scenario}?"}]
        response = await model.openai_client().chat.completions.create(
            model=served,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=max_tokens,
            logprobs=True,
            temperature=1.0,
        )
        choice = response.choices[0]
        text = choice.message.content or ""
        digits = sum(c.isdigit() for c in text) / (len(text) + 1)
        return Trajectory(
            messages_and_choices=[*messages, choice],
            reward=float(position) + digits,
            metadata={SERVED_KEY: served_step(served)},
        )

    async def group(model: TrainableModel, scenario: int, config: object) -> TrajectoryGroup:
        return await trajectory_group(single(model, scenario, i) for i in range(group_size))

    return group
