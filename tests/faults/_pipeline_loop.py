"""A pipeline run on LocalBackend and the tiny model, in a child process the parent SIGKILLs.

The child is forked from the forkserver of _training_loop.py (torch and arthex imported once),
registers the model, writes its live weights and optimizer tensors to `dump/` (so the parent
can compare them with the newest checkpoint), runs `PipelineTrainer` over `range(scenarios)`
with real chat completions from its own inference server, and reports each event to the
parent over a pipe. `kill=(POINT, N)` makes it SIGKILL itself the N-th time it reaches POINT:
the points of _training_loop.py (`pack`, `before-publish`, `after-publish`, ...),
`record-saved` (the pipeline record was just replaced) and `make-engine` (inside `register`:
the checkpoint is loaded, the inference engine not made yet).

With `hold=True` (every attempt the parent means to kill) the child can never end on its own:
it stops, reports `held` and waits to be killed, after its `HOLD_STEPS`-th update and before
the rollout of the stream's last scenario (so the stream cannot be finished, however fast the
machine). An attempt's kill therefore always lands: at the moment the parent chose, or at the
hold if the child got there first.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
from collections.abc import Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from . import _training_loop as loop

PROJECT = "faults"
NAME = "pipeline"
GROUP_SIZE = 2
BATCH = 2
BOUND = 2
HOLD_STEPS = 3  # updates an attempt that is to be killed may make before it holds
HELD_EXIT = 70  # a held child no one killed within HOLD_LIMIT_S exits with this code
HOLD_LIMIT_S = 600.0
PRELOAD = [
    *loop.PRELOAD,
    "arthex.core.pipeline",
    "arthex.adapters.run_files.pipeline",
    "tests._pipeline_checks",
    __name__,
]


def model_dir(base_path: Path) -> Path:
    return base_path / PROJECT / "models" / NAME


def start_child(
    options: Mapping[str, Any],
) -> tuple[multiprocessing.process.BaseProcess, Connection]:
    return loop.start_child(options, child_main, PRELOAD)


def hook_record_saves(killer: loop.Killer) -> None:
    """Count every save of the pipeline record as the point `record-saved` (after it)."""
    from arthex.adapters.run_files import pipeline as pipeline_state

    store: Any = pipeline_state.JsonPipelineStateStore
    save = store.save

    async def hooked_save(self: Any, run: Any, record: Any) -> None:
        await save(self, run, record)
        killer.reached("record-saved")

    store.save = hooked_save


def child_main(options: dict[str, Any], events: Connection) -> None:
    kill = options.get("kill")
    killer = loop.Killer(kill[0] if kill else None, kill[1] if kill else 0, events)
    loop.install_hooks(killer)
    hook_record_saves(killer)
    from arthex.adapters.inference import select

    killer.wrap(select, "make_engine", "make-engine")
    loop._quiet()
    asyncio.run(_run(options, events))


async def _run(options: dict[str, Any], events: Connection) -> None:
    from arthex.adapters.local import LocalBackend
    from arthex.composition.api import TrainableModel
    from arthex.core.pipeline import PipelineTrainer
    from tests._pipeline_checks import chat_rollout_fn

    base_path = Path(options["base_path"])
    holding = bool(options.get("hold"))
    last = options["scenarios"] - 1
    steps_here = 0
    rollout = chat_rollout_fn(GROUP_SIZE)

    async def rollout_fn(model: Any, scenario: int, config: object) -> Any:
        if holding and scenario == last:
            _hold(events, "last-scenario")
        return await rollout(model, scenario, config)

    def on_step(done: int, _metrics: Any) -> None:
        nonlocal steps_here
        events.send({"event": "step", "step": done})
        steps_here += 1
        if holding and steps_here >= HOLD_STEPS:
            _hold(events, f"step {done}")

    model = TrainableModel(
        name=NAME,
        project=PROJECT,
        base_model=options["base_model"],
        base_path=str(base_path),
        report_metrics=[],
    )
    backend = LocalBackend(engine="torch", full_finetune=True, seed=0)
    try:
        await model.register(backend)
        step = await model.get_step()
        _dump(backend, model, Path(options["dump"]) / f"resume-{os.getpid()}.safetensors")
        events.send({"event": "registered", "step": step, "pid": os.getpid()})
        trainer = PipelineTrainer(
            model,
            backend,
            rollout_fn,
            range(options["scenarios"]),
            None,
            num_rollout_workers=4,
            min_batch_size=BATCH,
            max_batch_size=BATCH,
            max_steps_off_policy=BOUND,
            learning_rate=1e-2,
            on_step=on_step,
        )
        await trainer.train()
        step = await model.get_step()
        _dump(backend, model, Path(options["dump"]) / f"final-{os.getpid()}.safetensors")
        events.send({"event": "done", "step": step, "pid": os.getpid()})
    finally:
        await backend.close()
        await model.close()


def _hold(events: Connection, where: str) -> None:
    """Stop this process where it is (its event loop included) until the parent kills it."""
    events.send({"event": "held", "where": where})
    threading.Event().wait(HOLD_LIMIT_S)
    os._exit(HELD_EXIT)  # only when the parent is gone: the test never waits this long


def _dump(backend: Any, model: Any, path: Path) -> None:
    from safetensors.torch import save_file

    weights, optimizer = backend.training_tensors(model.run)
    tensors = {f"w.{k}": v for k, v in weights.items()}
    tensors.update({f"o.{k}": v for k, v in optimizer.items()})
    save_file(tensors, str(path))
