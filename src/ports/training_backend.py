"""TrainingBackend: packs tensors, trains, serves, deletes the checkpoint files it is told to.

Its facets: the capabilities a backend may offer (SFT, export, step metrics), and the run
lease (RunLeases), one trainer per run: a backend whose checkpoints every process sees
(`Capability.ONE_TRAINER`) breaks when two trainers drive one run, so the model takes the
run's lease at `register` and keeps it until `close`, until the backend it is registered on
is closed, until it is garbage-collected, or until its process exits (core/lease_book.py).
Loggers (`Model.log` from an evaluator) never need it."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from enum import StrEnum
from typing import TYPE_CHECKING, Literal, Protocol, cast, runtime_checkable

import attrs

from ..core.config import TrainConfig
from ..core.errors import UnsupportedCapability
from ..core.identity import ModelSpec, RunRef
from ..core.trajectories import TrajectoryGroup

if TYPE_CHECKING:  # the SFT values import nothing of the ports; only names are needed here
    from ..core.conversations import Conversation
    from ..core.sft import TrainSFTConfig

ExportFormat = Literal["peft", "merged"]


class Capability(StrEnum):
    """Named capabilities; contract tests declare which they need, and a skip names it."""

    TRAIN = "train"
    INFERENCE = "inference"
    DELETE_CHECKPOINTS = "delete_checkpoints"
    RESUME = "resume"
    KL_PENALTY = "kl_penalty"
    LOSS_CISPO = "loss:cispo"
    LOSS_PPO = "loss:ppo"
    LOSS_IMPORTANCE_SAMPLING = "loss:importance_sampling"
    # The backend keeps a run's checkpoints where every process sees them (a run directory, a
    # service), so two trainers on one run would delete each other's checkpoints and race for
    # step numbers: the model holds the run's lease (RunLeases) from `register` to `close`.
    ONE_TRAINER = "one_trainer"
    SFT = "sft"
    EXPORT = "export"
    # Any kept checkpoint step can be served on request (`CheckpointServing`), also for a run
    # this backend does not train: what evaluating an older step, or evaluating while
    # another process trains, needs.
    SERVE_CHECKPOINT = "serve_checkpoint"


def _names(values: Iterable[str]) -> frozenset[str]:
    return frozenset(str(value) for value in values)


@attrs.frozen
class BackendCapabilities:
    names: frozenset[str] = attrs.field(converter=_names)

    def __contains__(self, name: object) -> bool:
        return str(name) in self.names

    def require(self, name: str, backend: str, hint: str = "") -> None:
        if name not in self.names:
            raise UnsupportedCapability(name, backend, hint)

    def check(self, config: TrainConfig, backend: str) -> None:
        """Raise UnsupportedCapability for the first thing `config` asks that the backend
        lacks (its loss; a KL penalty). The callers of `train_steps` call it (the model before
        anything is written, the training server before it accepts a job); backends trust it."""
        for name in required_capabilities(config):
            self.require(name, backend)


def required_capabilities(config: TrainConfig) -> list[str]:
    """The capabilities a training config needs, in the order they are checked."""
    names = [f"loss:{config.loss_fn}"]
    if config.kl_penalty_coef > 0:
        names.append(Capability.KL_PENALTY)
    return names


ALL_CAPABILITIES = BackendCapabilities(set(Capability))


@attrs.frozen
class InferenceEndpoint:
    """An OpenAI-compatible endpoint serving `{name}` (latest) and `{name}@{step}` (or the
    endpoint's own `step_format`).

    `follow_loop`, for a server that runs in this process on an event loop: called by the
    model on every `openai_client()`, it moves the server onto the running loop when the loop
    it ran on has ended (a script's second `asyncio.run`), same address; None otherwise."""

    base_url: str
    api_key: str
    model_name: str
    follow_loop: Callable[[], None] | None = attrs.field(
        default=None, kw_only=True, eq=False, repr=False
    )
    # How one step is named from `model_name` (`{name}` and `{step}`): a service may name
    # steps its own way (the hosted serverless API: `{name}:step{step}`).
    step_format: str = attrs.field(default="{name}@{step}", kw_only=True)

    def name_at(self, step: int) -> str:
        """The served name of `step`."""
        return self.step_format.format(name=self.model_name, step=step)

    def step_of(self, served: str) -> int | None:
        """The step a served name of this model names, None for any other name."""
        before, _, after = self.step_format.partition("{step}")
        prefix, suffix = before.format(name=self.model_name), after.format(name=self.model_name)
        if not served.startswith(prefix) or not served.endswith(suffix):
            return None
        digits = served[len(prefix) : len(served) - len(suffix)]
        return int(digits) if digits.isascii() and digits.isdigit() else None


class CheckpointFiles(Protocol):
    """What retention drives (`core/pruning.py`): a run's step, its checkpoints, deleting
    them. Every TrainingBackend is one; so is a run directory's own checkpoints read without a
    trainer (`adapters/local/checkpoints.RunCheckpoints`, what `arthex prune` opens)."""

    async def get_step(self, run: RunRef) -> int:
        """The newest durable checkpoint's step; 0 before any training."""
        ...

    async def checkpoint_steps(self, run: RunRef) -> list[int]:
        """The steps that have checkpoints, ascending."""
        ...

    async def delete_checkpoint_files(
        self, run: RunRef, steps_to_keep: Collection[int]
    ) -> list[int]:
        """Delete every checkpoint not in `steps_to_keep` (never the latest, never one being
        served); return the steps deleted."""
        ...


class TrainingBackend(Protocol):
    @property
    def capabilities(self) -> BackendCapabilities: ...

    async def register(self, model: ModelSpec) -> InferenceEndpoint | None:
        """Prepare to train and serve `model`; returns its endpoint (None if it serves none)."""
        ...

    async def get_step(self, run: RunRef) -> int:
        """The newest durable checkpoint's step; 0 before any training."""
        ...

    def train_steps(
        self, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        """Train on the groups, yielding one metrics dict per gradient step. When it is done,
        `get_step` is one higher, even if nothing was trainable. The groups and the config
        were checked by the core (`validation.check_training_groups`, the capabilities) before
        this is called. (ART's `backend.train(model, ...)` is another call: the model's.)"""
        ...

    async def checkpoint_steps(self, run: RunRef) -> list[int]:
        """The steps that have checkpoints, ascending."""
        ...

    async def delete_checkpoint_files(
        self, run: RunRef, steps_to_keep: Collection[int]
    ) -> list[int]:
        """Delete every checkpoint not in `steps_to_keep` (never the latest, never one being
        served); return the steps deleted."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class StepMetricsSource(Protocol):
    """A backend that keeps each step's training metrics with its checkpoint, so a training
    row lost to a crash between the checkpoint and the history append can be rebuilt."""

    async def step_metrics(self, run: RunRef, step: int) -> Sequence[Mapping[str, float]] | None:
        """The per-gradient-step metrics `train` yielded for the update that made `step`, or
        None when they were not kept."""
        ...


@runtime_checkable
class RunForgetting(Protocol):
    """A backend that holds an open run in memory (its trainer, what it serves) and can drop
    one: what a server that deletes a model calls before removing the run's files, so the same
    run registered again is opened afresh from its files (a fresh model at step 0 when they
    are gone) instead of continuing from the deleted one's weights. A backend that keeps
    nothing of a run between calls needs none of this."""

    async def forget_run(self, run: RunRef) -> None:
        """Release what this backend holds of `run` and stop serving it (requests already
        accepted finish, a training call in flight ends first); the run's files stay. The
        run is unknown here after, until it is registered again; a run not open is a no-op."""
        ...


@runtime_checkable
class RankStacks(Protocol):
    """A backend whose training runs in rank processes: their stacks for a hang report."""

    def rank_stacks(self, run: RunRef) -> str | None:
        """Every running rank's thread stacks as text (None: the run has no ranks running).
        Called from the hang watchdog's thread, never from the event loop; returns within a
        few seconds even when a rank does not answer."""
        ...


@runtime_checkable
class SupervisedFineTuning(Protocol):
    """A backend with the `sft` capability: supervised fine-tuning as one step of the run."""

    def train_sft(
        self, run: RunRef, conversations: Sequence[Conversation], config: TrainSFTConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        """Fine-tune on the conversations in `config.plan(...)`'s batches, with the loss (mean
        token cross-entropy per batch) on the trained assistant tokens only, yielding one
        metrics dict per gradient step. When it is done, `get_step` is one higher and the new
        step is served like an RL step's. Conversations with nothing trainable left (too long
        for the model) are dropped and counted; when none is left, InvalidInputError is raised
        before anything changes."""
        ...


def supervised(backend: object) -> SupervisedFineTuning:
    """The backend as an SFT trainer, or UnsupportedCapability when it is none."""
    capabilities = getattr(backend, "capabilities", ())
    if Capability.SFT not in capabilities or not callable(getattr(backend, "train_sft", None)):
        raise UnsupportedCapability(
            "sft",
            type(backend).__name__,
            "Supervised fine-tuning needs a backend that offers it (LocalBackend, "
            "TinkerBackend, or a ServerlessBackend whose server does)",
        )
    return cast(SupervisedFineTuning, backend)


@runtime_checkable
class ModelExporter(Protocol):
    """A backend with the `export` capability: a step's weights in a standard format."""

    async def export(
        self, run: RunRef, out_dir: str, *, step: int | None, format: ExportFormat
    ) -> str:
        """Write step `step` (latest when None) into the new folder `out_dir`: "peft" a PEFT
        adapter directory, "merged" a Hugging Face model directory (safetensors, config,
        tokenizer files copied byte for byte, chat template). Returns the folder."""
        ...


@attrs.frozen
class ServedCheckpoint:
    """A checkpoint step being served: send requests for `model_name` (`{name}@{step}`) to
    `endpoint`."""

    endpoint: InferenceEndpoint
    step: int
    model_name: str


@runtime_checkable
class CheckpointServing(Protocol):
    """A backend with the `serve_checkpoint` capability: any kept step of a run, served on
    request."""

    def serve_checkpoint(
        self, model: ModelSpec, step: int | None
    ) -> AbstractAsyncContextManager[ServedCheckpoint]:
        """Serve step `step` of `model`'s run (its latest checkpoint when None) as
        `{name}@{step}` while the block runs. The run need not be registered here: serving
        trains nothing and writes nothing of the run, so it needs no run lease, and an
        evaluator serves the checkpoints of a run another process trains. `{name}` keeps
        pointing where it did, and this backend's `delete_checkpoint_files` keeps the step
        while the block runs. A step without a complete checkpoint raises InvalidInputError
        naming the steps there are, before anything is served; `model.base_model` says what
        the checkpoint was trained from."""
        ...


def checkpoint_server(backend: object) -> CheckpointServing:
    """The backend as a server of any kept step, or UnsupportedCapability when it is none."""
    capabilities = getattr(backend, "capabilities", ())
    if Capability.SERVE_CHECKPOINT not in capabilities or not callable(
        getattr(backend, "serve_checkpoint", None)
    ):
        raise UnsupportedCapability(
            "serve_checkpoint",
            type(backend).__name__,
            "Serving a named checkpoint step needs a backend that offers it (LocalBackend, "
            "TinkerBackend)",
        )
    return cast(CheckpointServing, backend)


# --- the run lease: protects the backend's checkpoints and optimizer state ---------------


@attrs.frozen
class LeaseHolder:
    """Who holds a run's lease: enough to find the process, and to tell when it is gone."""

    pid: int
    host: str
    started_at: str  # ISO-8601
    registered_at: str = ""  # where the holder's model was registered ("train.py:31")

    def describe(self) -> str:
        where = f", registered at {self.registered_at}" if self.registered_at else ""
        return f"pid {self.pid} on host {self.host!r} (since {self.started_at}{where})"

    def is_this_process(self) -> bool:
        return self.pid == os.getpid() and self.host == socket.gethostname()


def held_by_this_process(run: RunRef, holder: LeaseHolder) -> str:
    """The refusal when the holder is another model of this very process."""
    where = holder.registered_at or "an unknown place"
    return (
        f"{run} is being trained by another model of this process (pid {holder.pid} on host "
        f"{holder.host!r}), registered at {where} and still open: one trainer per run. Close "
        "that model (`await model.close()`) or its backend (`await backend.close()`) first"
    )


class HeldLease(Protocol):
    @property
    def holder(self) -> LeaseHolder: ...

    async def release(self) -> None:
        """Give the run back; calling it twice is harmless."""
        ...

    def release_now(self) -> None:
        """`release` without an event loop, from any thread: what a finalizer of a model that
        was garbage-collected without `close` calls. Quick; twice is harmless."""
        ...


class RunLeases(Protocol):
    async def acquire(self, run: RunRef, *, registered_at: str = "") -> HeldLease:
        """Take `run`'s lease before anything of the run is written; `registered_at` says
        where (file:line) the model taking it was registered, for the holder's description.
        Raise RunBusyError naming the holder when a live trainer holds it (saying so when
        that is another model of this very process); take it over when its holder is dead
        (same host, process gone)."""
        ...


__all__ = [
    "ALL_CAPABILITIES",
    "BackendCapabilities",
    "Capability",
    "CheckpointFiles",
    "CheckpointServing",
    "ExportFormat",
    "HeldLease",
    "InferenceEndpoint",
    "LeaseHolder",
    "ModelExporter",
    "RunForgetting",
    "RunLeases",
    "ServedCheckpoint",
    "StepMetricsSource",
    "SupervisedFineTuning",
    "TrainingBackend",
    "UnsupportedCapability",
    "checkpoint_server",
    "held_by_this_process",
    "supervised",
]
