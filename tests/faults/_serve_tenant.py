"""One tenant of the serve soak (test_serve_soak.py), run as `python -m tests.faults._serve_tenant
OPTIONS_JSON` until its deadline, its SIGKILL, or its first error.

It is the loop a user of a training server writes: a TrainableModel registered with a
ServerlessBackend under the tenant's key, rollouts sampled through the server's
OpenAI-compatible proxy (`model.openai_client()`), `model.train`. The history is a local
`history.jsonl`; the trajectories go to an object store (moto's S3 server behind the fault
proxy, reached with one SDK attempt so every fault reaches arthex's own retries).

Every group carries the tenant's name and this attempt's id in its metadata, and every
trajectory the served model name the proxy answered with, so the audit can tell whose data
is where. Each step `model.train` returned is appended to `acks.jsonl` (fsynced): the steps
the tenant was told were trained; then `model.delete_checkpoints` keeps the latest and the
best by train reward, and the steps it deleted are appended too (after a line saying it is
about to ask, so a client killed between the server's delete and its answer is known). After
an error the client starts a new session, which resumes from the server's step; the parent
starts a killed client again.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

PROJECT = "soak"
NAME = "agent"  # every tenant's model has the same name: the server must keep them apart
GROUPS = 2
ROLLOUTS = 2
MAX_TOKENS = 4
TENANT_KEY = "tenant"
ATTEMPT_KEY = "attempt"
SERVED_KEY = "served"
REGISTER_WAIT_S = 120.0  # a killed client's lease on the server expires within its TTL
ERROR_PREFIX = "error: "
BEST_METRIC = "train/reward"
RETRY_S = 2.0


def store_of(options: dict[str, Any]) -> Any:
    import pyarrow.fs as pafs

    from arthex.adapters.parquet.store import ParquetTrajectoryStore

    filesystem = pafs.S3FileSystem(
        endpoint_override=options["s3_endpoint"], scheme="http",
        access_key="testing", secret_key="testing", region="us-east-1",
        connect_timeout=1, request_timeout=2,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1),
    )  # fmt: skip
    return ParquetTrajectoryStore(
        f"{options['bucket']}/{options['tenant']}",
        filesystem=filesystem,
        retry_budget=float(options["store_budget_s"]),
    )


async def register(model: Any, backend: Any) -> None:
    from arthex.core.errors import RunBusyError

    deadline = time.monotonic() + REGISTER_WAIT_S
    while True:
        try:
            await model.register(backend)
            return
        except RunBusyError:  # the lease of this tenant's killed client, until it expires
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(1.0)


async def rollout(model: Any, tenant: str, prompt: int, position: int) -> Any:
    from arthex.core.trajectories import Trajectory

    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"{tenant} asks question {prompt}"}
    ]
    response = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(),
        messages=messages,
        max_tokens=MAX_TOKENS,
        logprobs=True,
        temperature=1.0,
    )
    choice = response.choices[0]
    text = choice.message.content or ""
    return Trajectory(
        messages_and_choices=[*messages, choice],
        reward=float(position) + sum(c.isdigit() for c in text) / (len(text) + 1),
        metadata={SERVED_KEY: response.model},
    )


def acknowledge(acks: int, line: dict[str, Any]) -> None:
    os.write(acks, (json.dumps(line) + "\n").encode())
    os.fsync(acks)


async def session(options: dict[str, Any], acks: int) -> None:
    """Register (resuming at the server's step) and train until the deadline or an error."""
    from arthex.adapters.serverless import ServerlessBackend
    from arthex.composition.api import TrainableModel
    from arthex.core.config import TrainConfig
    from arthex.core.trajectories import trajectory_group

    tenant = options["tenant"]
    attempt = secrets.token_hex(6)
    backend = ServerlessBackend(options["url"], options["key"])
    model = TrainableModel(
        name=NAME,
        project=PROJECT,
        base_model=options["base_model"],
        base_path=str(Path(options["folder"]) / "art"),
        report_metrics=[],
        store=store_of(options),
    )
    try:
        await register(model, backend)
        while time.time() < options["deadline"]:
            groups = [
                await trajectory_group(
                    (rollout(model, tenant, p, r) for r in range(ROLLOUTS)),
                    metadata={TENANT_KEY: tenant, ATTEMPT_KEY: attempt},
                )
                for p in range(GROUPS)
            ]
            result = await model.train(groups, config=TrainConfig(learning_rate=1e-3))
            acknowledge(acks, {"step": result.step, "attempt": attempt, "at": time.time()})
            # retention, as a long run keeps its disk and its served models bounded
            # the intent first: a kill after the server deleted and before the answer was
            # written leaves this line alone, and the audit knows the call may have run
            acknowledge(acks, {"deleting_after": result.step})
            decision = await model.delete_checkpoints(best_checkpoint_metric=BEST_METRIC)
            acknowledge(acks, {"deleted": list(decision.deleted)})
    finally:
        await model.close()
        await backend.close()


async def main(options: dict[str, Any]) -> None:
    """Sessions until the deadline: after an error (the server gone, the store down past its
    budget, a job failed by a server restart) the next session resumes, as a user's retry
    loop would. Each error is one `error: <class>: <message>` line on stderr."""
    acks = os.open(
        Path(options["folder"]) / "acks.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
    )
    try:
        while time.time() < options["deadline"]:
            try:
                await session(options, acks)
            except Exception as exc:
                print(f"{ERROR_PREFIX}{type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr)
                sys.stderr.flush()
                await asyncio.sleep(RETRY_S)
    finally:
        os.close(acks)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
