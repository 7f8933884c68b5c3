"""A trainer process for the lease tests: `python -m tests._lease_client MODE URL KEY`.

It trains `lease/agent` through ServerlessBackend and reports on stdout, one JSON line per
event, so a test can drive two of them against one server:

- `hold`: register, train one step, say `ready`, then wait for `close` on stdin (close the
  backend, giving the lease back, and say `closed`), or be killed;
- `try`: register once; say `busy` (with the server's message) or train one step and say
  `trained` with the step reached;
- `wait`: register; at the first refusal say `busy`, wait for `go` on stdin, then retry until
  the lease is free, train one step and say `trained` with the step and how many refusals
  it counted.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from arthex.adapters.serverless import ServerlessBackend
from arthex.core.config import TrainConfig
from arthex.core.errors import RunBusyError
from arthex.core.identity import ModelSpec, RunRef
from arthex.testing.builders import synthetic_groups

RUN = RunRef("lease", "agent")
MAX_ATTEMPTS = 3000


def say(event: str, **data: object) -> None:
    print(json.dumps({"event": event, "pid": os.getpid(), **data}), flush=True)


async def read_line() -> str:
    line: str = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    return line.strip()


async def train_one(backend: ServerlessBackend) -> int:
    async for _ in backend.train(RUN, synthetic_groups(1), TrainConfig()):
        pass
    return await backend.get_step(RUN)


async def main(mode: str, url: str, key: str) -> None:
    backend = ServerlessBackend(url, key, poll_wait_s=1.0)
    spec = ModelSpec(run=RUN)
    if mode == "hold":
        await backend.register(spec)
        say("ready", step=await train_one(backend))
        while await read_line() != "close":
            pass
        await backend.close()
        say("closed")
        return
    refusals = 0
    try:
        while True:
            try:
                await backend.register(spec)
                break
            except RunBusyError as busy:
                refusals += 1
                if refusals == 1:
                    say("busy", message=str(busy))
                    if mode == "try":
                        return
                    while await read_line() != "go":
                        pass
                if refusals > MAX_ATTEMPTS:
                    raise
                await asyncio.sleep(0.1)
        say("trained", step=await train_one(backend), refusals=refusals)
    finally:
        await backend.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
