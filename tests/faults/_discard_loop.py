"""A pipeline run that discards scenarios, in a child process that SIGKILLs itself at a counted
point: the run of _pipeline_loop.py (LocalBackend, the tiny model, real chat completions),
over a short stream where some scenarios' rollouts all earn the same reward (`zero_variance`),
some scenarios' rollouts all fail (`errored`), and the stream ends on discards.

`kill=(POINT, N)` SIGKILLs the child the N-th time it reaches POINT: the points of
_training_loop.py and _pipeline_loop.py, and

- `discard`: the collector just decided to discard a group (in memory only);
- `history-row`: a row was just appended to history.jsonl.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from . import _pipeline_loop as pipeline
from . import _training_loop as loop

PROJECT = pipeline.PROJECT
NAME = "discards"
SCENARIOS = 48
ZERO_VARIANCE = frozenset({3, 10, 16, 21, 26, 35, 40, 45, 46, 47})  # it ends on three
ERRORED = frozenset({7, 30})
PRELOAD = [*pipeline.PRELOAD, __name__]


def start_child(options: Mapping[str, Any]) -> Any:
    return loop.start_child(options, child_main, PRELOAD)


def child_main(options: dict[str, Any], events: Connection) -> None:
    from arthex.adapters import jsonl_history
    from arthex.core.pipeline import batch_collector

    kill = options.get("kill")
    killer = loop.Killer(kill[0] if kill else None, kill[1] if kill else 0, events)
    loop.install_hooks(killer)
    pipeline.hook_record_saves(killer)
    history: Any = jsonl_history.JsonlHistory
    report = history.report

    async def hooked_report(self: Any, run: Any, row: Any) -> None:
        await report(self, run, row)
        killer.reached("history-row")

    history.report = hooked_report
    collector: Any = batch_collector.BatchCollector
    reason_of = collector._discard_reason

    def hooked_reason(self: Any, item: Any, step: int) -> str | None:
        reason: str | None = reason_of(self, item, step)
        if reason is not None:
            killer.reached("discard")
        return reason

    collector._discard_reason = hooked_reason
    loop._quiet()
    asyncio.run(_run(options, events))


async def _run(options: dict[str, Any], events: Connection) -> None:
    from arthex.adapters.local import LocalBackend
    from arthex.composition.api import TrainableModel
    from arthex.core.pipeline import PipelineTrainer
    from arthex.core.trajectories import TrajectoryGroup
    from tests._pipeline_checks import chat_rollout_fn

    chat = chat_rollout_fn(pipeline.GROUP_SIZE)

    async def rollout(model: Any, scenario: int, config: object) -> TrajectoryGroup:
        if scenario in ERRORED:
            raise RuntimeError(f"the environment of scenario {scenario} is broken")
        group = await chat(model, scenario, config)
        if scenario in ZERO_VARIANCE:
            for trajectory in group.trajectories:
                trajectory.reward = 1.0
        return group

    model = TrainableModel(
        name=NAME,
        project=PROJECT,
        base_model=options["base_model"],
        base_path=options["base_path"],
        report_metrics=[],
    )
    backend = LocalBackend(engine="torch", full_finetune=True, seed=0)
    try:
        await model.register(backend)
        events.send({"event": "registered", "step": await model.get_step(), "pid": os.getpid()})
        trainer = PipelineTrainer(
            model,
            backend,
            rollout,
            range(SCENARIOS),
            None,
            num_rollout_workers=4,
            min_batch_size=pipeline.BATCH,
            max_batch_size=pipeline.BATCH,
            max_steps_off_policy=pipeline.BOUND,
            learning_rate=1e-2,
            on_step=lambda done, _metrics: events.send({"event": "step", "step": done}),
        )
        await trainer.train()
        events.send({"event": "done", "step": await model.get_step(), "pid": os.getpid()})
    finally:
        await backend.close()
        await model.close()


def model_dir(base_path: Path) -> Path:
    return base_path / PROJECT / "models" / NAME
