"""A trainer process for the two-trainer test: LocalBackend on the tiny model, CPU.

`trainer_main` registers, trains `steps` steps on synthetic groups, reports to the parent over
a pipe, and then, with `hold`, keeps the run (and its lease) until it is killed. A refused
register is reported as the error's type and message instead.
"""

from __future__ import annotations

import asyncio
import os
import signal
from multiprocessing.connection import Connection
from typing import Any

PROJECT, NAME = "two", "trainers"


def trainer_main(options: dict[str, Any], events: Connection) -> None:
    asyncio.run(_main(options, events))


async def _main(options: dict[str, Any], events: Connection) -> None:
    from arthex.adapters.local import LocalBackend
    from arthex.composition.api import TrainableModel
    from arthex.core.config import TrainConfig
    from arthex.core.errors import RunBusyError
    from arthex.testing.builders import synthetic_groups

    model = TrainableModel(
        name=NAME,
        project=PROJECT,
        base_model=options["base_model"],
        base_path=options["base_path"],
        report_metrics=[],
    )
    backend = LocalBackend(engine="torch", full_finetune=True, seed=0)
    try:
        try:
            await model.register(backend)
        except RunBusyError as error:
            events.send({"event": "busy", "pid": os.getpid(), "message": str(error)})
            return
        start = await model.get_step()
        events.send({"event": "registered", "pid": os.getpid(), "step": start})
        step = start
        for i in range(options["steps"]):
            groups = synthetic_groups(offset=start + i)
            step = (await model.train(groups, config=TrainConfig(learning_rate=1e-3))).step
        events.send({"event": "trained", "pid": os.getpid(), "step": step})
        if options.get("hold"):
            signal.pause()  # keeps the run until the parent kills this process
    finally:
        await backend.close()
        await model.close()
