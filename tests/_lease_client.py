"""A trainer process for the lease tests: `python -m tests._lease_client MODE URL KEY`.

It trains `lease/agent` through ServerlessBackend and reports on stdout, one JSON line per
event, so a test can drive two of them against one server:

- `hold`: register, train one step, say `ready`, then wait for `close` on stdin (close the
  backend, giving the lease back, and say `closed`), or be killed;
- `try`: register once; say `busy` (with the server's message) or train one step and say
  `trained` with the step reached;
- `wait`: register; at the first refusal say `busy`, wait for `go` on stdin, then retry until
  the lease is free, train one step and say `trained` with the step and how many refusals
  it counted;
- `relay`: one backend through two event loops, as a notebook's cells or two `asyncio.run`
  calls use it: register and train one step in the first, then again in the second, say
  `ready`, and hold the lease until `close` on stdin, as `hold` does.
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
    """The next line from the test, stripped; the test gone (end of input) ends this process
    rather than leaving it waiting for a word that cannot come."""
    line: str = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if not line:
        sys.exit("the test closed its end: stopping")
    return line.strip()


async def train_one(backend: ServerlessBackend) -> int:
    async for _ in backend.train_steps(RUN, synthetic_groups(1), TrainConfig()):
        pass
    return await backend.get_step(RUN)


async def main(mode: str, url: str, key: str, backend: ServerlessBackend | None = None) -> None:
    backend = backend or ServerlessBackend(url, key, poll_wait_s=1.0)
    spec = ModelSpec(run=RUN)
    if mode == "hold":
        await backend.register(spec)
        say("ready", step=await train_one(backend))
        while await read_line() != "close":
            pass
        await backend.close()
        say("closed")
        return
    if mode == "relay":
        await backend.register(spec)
        await train_one(backend)
        return  # the caller runs the rest on a new event loop: this one's tasks end with it
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


async def relay_second_loop(backend: ServerlessBackend) -> None:
    await backend.register(ModelSpec(run=RUN))
    say("ready", step=await train_one(backend))
    while await read_line() != "close":
        pass
    await backend.close()
    say("closed")


if __name__ == "__main__":
    if sys.argv[1] == "relay":
        relayed = ServerlessBackend(sys.argv[2], sys.argv[3], poll_wait_s=1.0)
        asyncio.run(main("relay", sys.argv[2], sys.argv[3], backend=relayed))
        asyncio.run(relay_second_loop(relayed))
    else:
        asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
