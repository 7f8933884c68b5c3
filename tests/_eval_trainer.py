"""A trainer process for the evaluation tests: `python -m tests._eval_trainer BASE TINY`.

It registers `evals/agent` on a LocalBackend (taking the run's trainer lease), trains one
step, says `ready` with the step on stdout, and holds the run until `close` on stdin.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import arthex
from arthex.testing.builders import synthetic_groups


async def read_line() -> str:
    """The next line from the test; the end of its input counts as `close` (the test is gone,
    and waiting on would spin on an empty read)."""
    line: str = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    return line.strip() if line else "close"


async def main(base: str, tiny: str) -> None:
    backend = arthex.LocalBackend(path=base, full_finetune=True)
    model = arthex.TrainableModel(
        name="agent", project="evals", base_model=tiny, base_path=base, report_metrics=[]
    )
    try:
        await model.register(backend)
        result = await model.train(synthetic_groups(1), {"learning_rate": 1e-3})
        print(json.dumps({"event": "ready", "pid": os.getpid(), "step": result.step}), flush=True)
        while await read_line() != "close":
            pass
    finally:
        await model.close()
        await backend.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
