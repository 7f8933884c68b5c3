"""Running admitted training jobs: one task per job, an optional server-wide queue, and the
job's events as the backend trains.

The service admits a job (every check done, nothing written) and hands it here. A job waits
for a slot when `--max-running-jobs` is set (the queue whose depth /metrics reports), then
trains; every outcome ends with a terminal event, a server shutdown included, so a client
waiting on the job is never left hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import attrs

from ...adapters.serverless.wire import (
    GRADIENT_STEP,
    TRAIN_OPTIONS,
    TRAINING_ENDED,
    TRAINING_FAILED,
    TRAINING_STARTED,
    encode_event_metrics,
)
from ...core.backend_train import train_config_from_options
from ...core.config import TrainConfig
from ...core.errors import ArthexError, InvalidInputError
from ...core.trajectories import TrajectoryGroup
from ...ports.training_backend import TrainingBackend
from .jobs import JobLog
from .registry import ModelRecord

__all__ = ["JobRunner", "parse_config", "parse_groups"]

logger = logging.getLogger("arthex.serverless")


class JobRunner:
    def __init__(
        self,
        backend: TrainingBackend,
        *,
        max_running_jobs: int,
        scrub: Callable[[str], str],
        on_end: Callable[[ModelRecord], None],
    ) -> None:
        self.backend = backend
        self.max_running_jobs = max_running_jobs
        self.scrub = scrub
        self.on_end = on_end
        self.training: dict[str, str] = {}  # model id -> its job's id, queued or running
        self.queued = 0
        self._slots: asyncio.Semaphore | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def running(self) -> int:
        return len(self.training) - self.queued

    def open(self) -> None:
        if self.max_running_jobs:
            self._slots = asyncio.Semaphore(self.max_running_jobs)

    def start(
        self,
        job: JobLog,
        record: ModelRecord,
        started: Mapping[str, Any],
        updates: Callable[[], AsyncIterator[Mapping[str, float]]],
    ) -> None:
        """Run `updates()` (an RL or SFT update's metrics, one per gradient step) as `job`:
        it waits for a slot (with `max_running_jobs`), then trains, and ends with a terminal
        event whatever happens."""
        self.training[record.id] = job.id

        async def train() -> None:
            run = record.run
            slot = False
            try:
                if self._slots is not None:
                    self.queued += 1
                    try:
                        await self._slots.acquire()
                    finally:
                        self.queued -= 1
                    slot = True
                step = await self.backend.get_step(run)
                job.append(TRAINING_STARTED, {"step": step, **started})
                count = 0
                async for metrics in updates():
                    count += 1
                    job.append(GRADIENT_STEP, encode_event_metrics(metrics))
                new_step = await self.backend.get_step(run)
                job.append(TRAINING_ENDED, {"step": new_step, "num_gradient_steps": count})
            except asyncio.CancelledError:
                job.append(
                    TRAINING_FAILED,
                    failure("the training server shut down during this job", "Interrupted"),
                )
                raise
            except Exception as exc:
                if not isinstance(exc, ArthexError):
                    logger.exception("job %s failed", job.id)
                message = self.scrub(str(exc))
                job.append(TRAINING_FAILED, failure(message, type(exc).__name__))
            finally:
                if slot and self._slots is not None:
                    self._slots.release()
                self.training.pop(record.id, None)
                self.on_end(record)

        task = asyncio.create_task(train(), name=f"job-{job.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Stop every job (each gets a training_failed event)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


def failure(message: str, kind: str) -> dict[str, str]:
    """A training_failed event's data: `error_message` is what clients show."""
    return {"error_message": message, "message": message, "type": kind}


def parse_config(payload: object) -> TrainConfig:
    if payload is None:
        return TrainConfig()
    if not isinstance(payload, Mapping):
        raise InvalidInputError(f"config must be a JSON object, got {type(payload).__name__}")
    try:
        return TrainConfig(**{str(k): v for k, v in payload.items()})
    except (TypeError, OverflowError) as exc:
        raise InvalidInputError(f"config: {exc}; see TrainConfig for the fields") from None


# TrainConfig fields of arthex's own that ART's train options do not name; arthex's client
# sends them in `experimental_config` when they are set away from their defaults.
_OWN_FIELDS = ("train_incomplete_trajectories",)


def experimental_config(payload: object) -> TrainConfig:
    """The config of a job sent as the hosted API's `experimental_config`: ART's train
    options by their names (a null is an option not set), and arthex's own fields."""
    if not isinstance(payload, Mapping):
        raise InvalidInputError(
            f"experimental_config must be a JSON object, got {type(payload).__name__}"
        )
    options = {str(k): v for k, v in payload.items() if v is not None or k not in TRAIN_OPTIONS}
    own = {key: options.pop(key) for key in _OWN_FIELDS if key in options}
    try:
        config = train_config_from_options(options)
        return attrs.evolve(config, **own) if own else config
    except (TypeError, OverflowError) as exc:
        raise InvalidInputError(f"experimental_config: {exc}") from None


def parse_groups(payload: object) -> list[TrajectoryGroup]:
    from pydantic import ValidationError

    if not isinstance(payload, list):
        raise InvalidInputError("trajectory_groups must be a JSON list of trajectory groups")
    if not payload:
        raise InvalidInputError("train got an empty list of groups: there is nothing to train on")
    groups = []
    for index, item in enumerate(payload):
        try:
            groups.append(TrajectoryGroup.model_validate(item))
        except (ValidationError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"trajectory_groups[{index}] is not a group: {exc}") from None
    return groups
