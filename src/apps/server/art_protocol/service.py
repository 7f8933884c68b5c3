"""What the ART API's routes do, over any arthex TrainingBackend.

A model is registered with the backend the first time any route names it (`/register`
first, as ART's clients do; after a server restart a client that goes straight to
`/_train_model` or `/_get_step` is registered again, at its latest checkpoint). The server
keeps checkpoints and optimizer state under its own base path; the client keeps its history
and trajectories under its own.

Training runs as a job that outlives its HTTP stream: `start_train` checks everything, then
starts a task that drives the backend's update to its end and queues each gradient step's
metrics for the stream. A client that goes away stops nothing: the step completes (or, if
the update fails, the backend rolls it back to the latest checkpoint), and `/_get_step` says
which. The stream ends only once the backend's update has ended, so the new step is visible
the moment the client reads the end. A server stopped during a job cancels it (the backend
rolls back); a server killed loses only the step in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ....core.backend_train import checked_train_steps
from ....core.config import TrainConfig
from ....core.errors import ArthexError, BackendError, InvalidInputError, UnsupportedCapability
from ....core.identity import ModelSpec, RunRef
from ....core.trajectories import TrajectoryGroup
from ....ports.training_backend import Capability, InferenceEndpoint, TrainingBackend
from .sampled_ids import Render, fill_sampled_ids
from .wire import ArtModel

__all__ = ["ArtConflictError", "ArtService", "ServerStoppedError", "TrainJob", "backend_train"]

logger = logging.getLogger("arthex.art_protocol")


def backend_train(
    backend: TrainingBackend, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
) -> AsyncIterator[Mapping[str, float]]:
    """The training port's update call, behind the core's input checks, in one place."""
    return checked_train_steps(backend, run, groups, config)


class ArtConflictError(InvalidInputError):
    """The request disagrees with what the server already has (HTTP 409)."""


class ServerStoppedError(BackendError):
    """The server stopped while an update ran; it was rolled back (HTTP 503)."""


@attrs.define
class Registered:
    spec: ModelSpec
    endpoint: InferenceEndpoint


@attrs.frozen
class _Metrics:
    values: dict[str, float]


@attrs.frozen
class _Done:
    pass


@attrs.frozen
class _Failed:
    error: BaseException


_Item = _Metrics | _Done | _Failed


class TrainJob:
    """One /_train_model update: a task that runs to its end whoever listens, and the queue
    of what it produced, read by the stream."""

    def __init__(self, run: RunRef) -> None:
        self.run = run
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    def put(self, item: _Item) -> None:
        self._queue.put_nowait(item)

    async def next(self) -> dict[str, float] | None:
        """The next gradient step's metrics; None when the update has ended; its error when
        it failed."""
        item = await self._queue.get()
        if isinstance(item, _Failed):
            raise item.error
        if isinstance(item, _Done):
            return None
        return item.values


def numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    """A metrics line as ART's client reads it: every value a number (booleans as 0 or 1,
    anything else left out)."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, int | float):  # bool is an int: 0.0 or 1.0
            out[str(key)] = float(value)
    return out


class ArtService:
    """The ART API's state: the registered models, their tokenizers, the running jobs."""

    def __init__(
        self,
        backend: TrainingBackend,
        *,
        base_path: str | Path,
        inference_base_url: Callable[[], str],
        allowed_base_models: Collection[str] | None = None,
        tokenizer_loader: Callable[[str], tuple[Render, int]] | None = None,
    ) -> None:
        self.backend = backend
        self.base_path = Path(base_path)
        self.inference_base_url = inference_base_url
        self.allowed_base_models = (
            frozenset(allowed_base_models) if allowed_base_models is not None else None
        )
        self._load_tokenizer = tokenizer_loader or _hugging_face_tokenizer
        self._registered: dict[RunRef, Registered] = {}
        self._by_name: dict[str, RunRef] = {}
        self._opening: dict[RunRef, asyncio.Lock] = {}
        self._tokenizers: dict[str, tuple[Render, int]] = {}
        self._jobs: set[asyncio.Task[None]] = set()

    # --- models -------------------------------------------------------------------------

    async def ensure(self, model: ArtModel) -> Registered:
        """The model, registered with the backend (once)."""
        run = model.run
        found = self._registered.get(run)
        if found is not None:
            self._same_base(found, model)
            return found
        lock = self._opening.setdefault(run, asyncio.Lock())
        async with lock:
            found = self._registered.get(run)
            if found is not None:
                self._same_base(found, model)
                return found
            other = self._by_name.get(run.name)
            if other is not None and other != run:
                raise ArtConflictError(
                    f"a model named {run.name!r} is already registered in project "
                    f"{other.project!r}; the inference server serves models by name, so give "
                    "this one another name"
                )
            if not model.trainable or model.base_model is None:
                raise InvalidInputError(
                    f"model {run} is not a TrainableModel (trainable false, or no base_model); "
                    "the server trains TrainableModels only"
                )
            if self.allowed_base_models is not None and (
                model.base_model not in self.allowed_base_models
            ):
                raise InvalidInputError(
                    f"base_model {model.base_model!r} is not one this server allows; allowed: "
                    f"{', '.join(sorted(self.allowed_base_models))}"
                )
            spec = ModelSpec(
                run=run, base_model=model.base_model, trainable=True, base_path=str(self.base_path)
            )
            try:
                endpoint = await self.backend.register(spec)
            except Exception as exc:
                if isinstance(exc, UnsupportedCapability):
                    raise
                # One answer whatever the reason (a missing path, a folder that is not a
                # model, a hub id out of reach), so a client cannot probe the server's
                # files; the reason is the operator's, in the log.
                logger.warning("the backend could not load base_model %r: %r", spec.base_model, exc)
                raise InvalidInputError(
                    f"base_model {spec.base_model!r:.200} cannot be loaded by this server's "
                    f"backend ({type(self.backend).__name__}); name a model the server offers"
                ) from None
            if endpoint is None:
                raise UnsupportedCapability(
                    Capability.INFERENCE,
                    type(self.backend).__name__,
                    "ART's clients sample from the server's inference endpoint; serve with a "
                    "backend that serves its models (local, tinker)",
                )
            registered = Registered(spec=spec, endpoint=endpoint)
            self._registered[run] = registered
            self._by_name[run.name] = run
            logger.info("registered %s (%s)", run, model.base_model)
            return registered

    @staticmethod
    def _same_base(found: Registered, model: ArtModel) -> None:
        if model.base_model is not None and model.base_model != found.spec.base_model:
            raise ArtConflictError(
                f"model {found.spec.run} is registered with base_model "
                f"{found.spec.base_model!r}, not {model.base_model!r}; use another name"
            )

    async def register(self, model: ArtModel) -> None:
        """ART's /register: a TrainableModel is registered with the backend; a prompted
        model (trainable false) needs nothing of the server."""
        if model.trainable:
            await self.ensure(model)

    async def get_step(self, model: ArtModel) -> int:
        if not model.trainable:
            return 0
        await self.ensure(model)
        return await self.backend.get_step(model.run)

    async def prepare(self, model: ArtModel) -> None:
        await self.ensure(model)

    def endpoint_for(self, served_name: str) -> InferenceEndpoint | None:
        """The backend endpoint serving `{name}` or `{name}@{step}`, if that name is ours."""
        name = served_name.partition("@")[0]
        run = self._by_name.get(name)
        return self._registered[run].endpoint if run is not None else None

    def endpoints(self) -> list[tuple[InferenceEndpoint, list[str]]]:
        """Each distinct backend endpoint with the model names registered on it."""
        found: dict[tuple[str, str], tuple[InferenceEndpoint, list[str]]] = {}
        for registered in self._registered.values():
            key = (registered.endpoint.base_url, registered.endpoint.api_key)
            found.setdefault(key, (registered.endpoint, []))[1].append(registered.spec.run.name)
        return list(found.values())

    # --- checkpoints ----------------------------------------------------------------------

    async def delete_checkpoints(self, model: ArtModel, steps_to_keep: Sequence[int]) -> list[int]:
        """ART's /_delete_checkpoint_files: every checkpoint not kept is deleted, except the
        latest and any being served or trained from (the backend's rule)."""
        await self.ensure(model)
        try:
            deleted = await self.backend.delete_checkpoint_files(model.run, steps_to_keep)
        except Exception as exc:  # NAT's adapter swallows this error: it must reach the log
            logger.warning("deleting checkpoints of %s failed: %s", model.run, exc)
            raise
        logger.info(
            "deleted checkpoints %s of %s (kept %s)", deleted, model.run, list(steps_to_keep)
        )
        return deleted

    # --- training -------------------------------------------------------------------------

    async def start_train(
        self, model: ArtModel, groups: list[TrajectoryGroup], config: TrainConfig
    ) -> TrainJob:
        """Check, fill in NAT-shaped Choices' token ids, then start the update as a job."""
        registered = await self.ensure(model)
        base_model = registered.spec.base_model
        assert base_model is not None
        groups, filled = await asyncio.to_thread(
            fill_sampled_ids,
            groups,
            lambda: self._tokenizer(base_model)[0],
            lambda: self._tokenizer(base_model)[1],
        )
        if filled:
            logger.info(
                "%s: token ids of %d Choices taken from their logprobs (prompt rendered)",
                model.run,
                filled,
            )
        job = TrainJob(model.run)
        task = asyncio.create_task(self._run(job, groups, config), name=f"art-train-{model.run}")
        job.task = task
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)
        return job

    def _tokenizer(self, base_model: str) -> tuple[Render, int]:
        found = self._tokenizers.get(base_model)
        if found is None:
            found = self._tokenizers[base_model] = self._load_tokenizer(base_model)
        return found

    async def _run(self, job: TrainJob, groups: list[TrajectoryGroup], config: TrainConfig) -> None:
        count = 0
        updates = backend_train(self.backend, job.run, groups, config)
        try:
            try:
                async for metrics in updates:
                    count += 1
                    job.put(_Metrics(numeric(metrics)))
            finally:  # a cancelled update is closed here, so the backend rolls it back now
                close = getattr(updates, "aclose", None)
                if close is not None:
                    await close()
            step = await self.backend.get_step(job.run)
            logger.info("%s trained to step %d (%d gradient steps)", job.run, step, count)
            job.put(_Done())
        except asyncio.CancelledError:
            logger.warning("%s: the server stopped during the update; rolled back", job.run)
            job.put(
                _Failed(
                    ServerStoppedError(
                        "the server stopped during this update; it was rolled back to the "
                        "latest checkpoint: train the same groups again"
                    )
                )
            )
            raise
        except Exception as exc:
            if not isinstance(exc, ArthexError):
                logger.exception("training %s failed", job.run)
            else:
                logger.warning("training %s failed: %s", job.run, exc)
            job.put(_Failed(exc))

    @property
    def running_jobs(self) -> int:
        return len(self._jobs)

    async def stop_jobs(self) -> None:
        """Cancel the running updates and wait for them: the backend rolls each back to its
        latest checkpoint, and each one's stream ends with its failure."""
        tasks = list(self._jobs)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    async def close(self) -> None:
        """Stop the running jobs, then close the backend."""
        await self.stop_jobs()
        await self.backend.close()


def _hugging_face_tokenizer(base_model: str) -> tuple[Render, int]:
    from ....adapters.inference.chat import ChatTokenizer

    try:
        chat = ChatTokenizer.load(base_model)
    except ArthexError:
        raise
    except Exception as exc:
        raise BackendError(
            f"the tokenizer of {base_model!r} could not be loaded to render the prompts of "
            f"Choices that carry no token ids: {exc}"
        ) from exc

    def render(
        messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
    ) -> list[int]:
        return chat.render(messages, tools, add_generation_prompt=True)

    return render, chat.vocab_size
