"""The use cases: log, train, delete checkpoints, serve. All state management lives here.

A `Model` takes its ports explicitly; the public `arthex.Model` fills in the defaults from the
composition root. Backends receive identities and data, never this object.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ..ports.metrics_reporter import ConfigRecorder, MetricsHistory, MetricsReporter, SampleRecorder
from ..ports.training_backend import (
    Capability,
    ExportFormat,
    InferenceEndpoint,
    ModelExporter,
    StepMetricsSource,
    TrainingBackend,
)
from ..ports.trajectory_store import TrajectoryStore
from .config import TrainConfig
from .conversations import conversations_from
from .errors import BackendError, InvalidInputError, NotRegisteredError, UnsupportedCapability
from .history_index import HistoryIndex
from .identity import ModelSpec, RunRef, validate_name
from .lr_policy import REWARD_STD_DEV_KEY, RewardStdDevPolicy
from .metrics import MetricsRow, aggregate_training_metrics, qualify, summarize
from .progress import ProgressLine
from .retention import BestStep, Direction, RetentionDecision, decide
from .sft import SFT_TIME_KEY, TrainSFTConfig, collect_updates, sft_rows
from .sft import supervised as supervised_backend
from .trajectories import Trajectory, TrajectoryGroup
from .validation import check_training_groups, groups_from_log_input

if TYPE_CHECKING:
    from openai import AsyncOpenAI

logger = logging.getLogger("arthex")

LogInput = Iterable[TrajectoryGroup] | Iterable[Trajectory | BaseException] | TrajectoryGroup


@attrs.frozen
class TrainResult:
    """The step the update produced and the training metrics recorded at it."""

    step: int
    metrics: Mapping[str, float | None]


class Model:
    """A model whose evaluations are logged; no backend needed. Its step is always 0."""

    def __init__(
        self,
        *,
        name: str,
        project: str,
        store: TrajectoryStore,
        history: MetricsHistory,
        mirrors: Sequence[MetricsReporter] = (),
        base_path: str = ".art",
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.run = RunRef(project=project, name=name)
        self.base_path = base_path
        self.config: dict[str, Any] = dict(config or {})
        self._store = store
        self._history = history
        self._mirrors = tuple(mirrors)
        self._index: HistoryIndex | None = None
        self._lr_policies: dict[int | None, RewardStdDevPolicy] = {}
        self._best_steps: dict[tuple[str, Direction], BestStep] = {}
        self._config_recorded = False

    @property
    def name(self) -> str:
        return self.run.name

    @property
    def project(self) -> str:
        return self.run.project

    @property
    def trainable(self) -> bool:
        return False

    def spec(self) -> ModelSpec:
        return ModelSpec(
            run=self.run,
            base_model=None,
            trainable=self.trainable,
            base_path=self.base_path,
            config=self.config,
        )

    async def get_step(self) -> int:
        return 0

    async def log(
        self,
        trajectories: LogInput | None = None,
        split: str = "val",
        *,
        metrics: Mapping[str, float | int | bool | None] | None = None,
        step: int | None = None,
    ) -> MetricsRow | None:
        """Write the groups under (split, step) and one history row of their metrics.

        With no step, trajectories are filed under the current step: the policy that produced
        them. Returns the row written, or None when there was nothing to log.
        """
        validate_name(split, "split")
        groups = groups_from_log_input(trajectories)
        if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
            raise InvalidInputError(f"step must be an integer >= 0, got {step!r}")
        extra = qualify(dict(metrics or {}), split)
        if not groups and not extra:
            return None
        values: dict[str, Any] = summarize(groups, split) if groups else {}
        values.update(extra)
        at = await self.get_step() if step is None else step
        row = MetricsRow(step=at, values=values)  # validates every value before any write
        if groups:
            await self._store.write(self.run, split, at, groups)
            await self._report_samples(split, at, groups)
        await self._report(row)
        return row

    async def history(self) -> Sequence[MetricsRow]:
        """Every row of this model's history, oldest first."""
        return await self._history.rows(self.run)

    async def close(self) -> None:
        for reporter in (self._history, *self._mirrors):
            await reporter.close()

    async def __aenter__(self) -> Model:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals shared with TrainableModel ---------------------------------------------

    async def _report(self, row: MetricsRow) -> None:
        """The history first (authoritative), then the mirrors; keep the index current."""
        self._record_config()
        await self._history.report(self.run, row)
        if self._index is not None:
            self._index.observe(row)
        for mirror in self._mirrors:
            await mirror.report(self.run, row)

    async def _report_samples(
        self, split: str, step: int, groups: Sequence[TrajectoryGroup]
    ) -> None:
        for mirror in self._mirrors:
            if isinstance(mirror, SampleRecorder):
                await mirror.report_samples(self.run, split, step, groups)

    def _record_config(self, extra: Mapping[str, Any] | None = None) -> None:
        if self._config_recorded and extra is None:
            return
        self._config_recorded = True
        payload = {"model": self.spec().to_json(), **(extra or {})}
        for mirror in self._mirrors:
            if isinstance(mirror, ConfigRecorder):
                mirror.update_config(self.run, payload)

    async def _history_index(self) -> HistoryIndex:
        """Built once from the ledger, then kept current by `_report`: the policies' cost per
        decision does not grow with the history."""
        if self._index is None:
            self._index = HistoryIndex(await self._history.rows(self.run))
        return self._index


GRADIENT_STEPS_KEY = "data/step_num_gradient_steps"  # on every training row, never null


def _training_row(
    step: int, samples: Sequence[Mapping[str, float]], extra: Mapping[str, float | None]
) -> MetricsRow:
    values: dict[str, float | None] = dict(aggregate_training_metrics(samples))
    values.update(extra)
    values[GRADIENT_STEPS_KEY] = float(len(samples))
    return MetricsRow(step=step, values=values)


class TrainableModel(Model):
    """A model trained by a backend: `register`, then `train`, `log`, `delete_checkpoints`."""

    def __init__(
        self,
        *,
        name: str,
        project: str,
        base_model: str,
        store: TrajectoryStore,
        history: MetricsHistory,
        mirrors: Sequence[MetricsReporter] = (),
        base_path: str = ".art",
        config: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            name=name,
            project=project,
            store=store,
            history=history,
            mirrors=mirrors,
            base_path=base_path,
            config=config,
        )
        if not isinstance(base_model, str) or not base_model:
            raise InvalidInputError(
                f"base_model must be a model id or directory, got {base_model!r}"
            )
        self.base_model = base_model
        self._backend: TrainingBackend | None = None
        self._endpoint: InferenceEndpoint | None = None
        self._client: AsyncOpenAI | None = None
        self._step: int | None = None
        self._train_lock = asyncio.Lock()
        self._pinned: set[int] = set()

    @property
    def trainable(self) -> bool:
        return True

    async def close(self) -> None:
        """Close the cached inference client, then the reporters (not the backend: it may
        serve other models; close it yourself)."""
        if self._client is not None:
            await self._client.close()
            self._client = None
        await super().close()

    def spec(self) -> ModelSpec:
        return ModelSpec(
            run=self.run,
            base_model=self.base_model,
            trainable=True,
            base_path=self.base_path,
            config=self.config,
        )

    @property
    def backend(self) -> TrainingBackend:
        if self._backend is None:
            raise NotRegisteredError(
                f"model {self.run} has no backend yet; call `await model.register(backend)` first"
            )
        return self._backend

    async def register(self, backend: TrainingBackend) -> None:
        """Hand the model to a backend: it prepares training and serving for it."""
        spec = self.spec()
        endpoint = await backend.register(spec)
        await self._store.write_model_spec(spec)
        self._backend = backend
        self._endpoint = endpoint
        self._client = None
        self._step = await backend.get_step(self.run)
        async with self._train_lock:
            await self._repair_training_row(self._step)

    async def _repair_training_row(self, step: int) -> None:
        """Rebuild the training row of `step` when a crash (or a failed append) lost it after
        the backend had saved the checkpoint: the update is durable, so its metrics must be
        too. Only the newest step can be missing its row, and only backends that keep each
        step's metrics with its checkpoint can supply it."""
        backend = self.backend
        if step < 1 or not isinstance(backend, StepMetricsSource):
            return
        index = await self._history_index()
        if index.has_value(GRADIENT_STEPS_KEY, step):
            return
        samples = await backend.step_metrics(self.run, step)
        if samples is None:
            return
        logger.warning("rebuilding the lost training row of %s at step %d", self.run, step)
        await self._report(_training_row(step, samples, {"time/step_trainer_s": None}))

    async def get_step(self) -> int:
        """The newest durable checkpoint's step, as the backend knows it."""
        self._step = await self.backend.get_step(self.run)
        return self._step

    def get_inference_name(self, step: int | None = None) -> str:
        """`{name}@{step}`; with no step, the latest step this model knows of."""
        if step is None:
            step = self._step if self._step is not None else 0
        return self.run.inference_name(step)

    def openai_client(self) -> AsyncOpenAI:
        """An `openai.AsyncOpenAI` for the backend's endpoint (cached per registration)."""
        if self._endpoint is None:
            raise NotRegisteredError(
                f"model {self.run} has no inference endpoint: register it with a backend that "
                "serves (e.g. LocalBackend) first"
            )
        if self._client is None:
            from openai import AsyncOpenAI  # the client class, not only the types

            self._client = AsyncOpenAI(
                base_url=self._endpoint.base_url, api_key=self._endpoint.api_key, timeout=1200.0
            )
        return self._client

    async def train(
        self,
        trajectory_groups: Iterable[TrajectoryGroup],
        config: TrainConfig | None = None,
        *,
        verbose: bool = False,
        progress: bool | None = None,
    ) -> TrainResult:
        """One RL update: log the groups at step N, train, record the metrics at N+1.

        `progress` shows a line per gradient step on a terminal (None: only when stderr is a
        terminal; False: never)."""
        backend = self.backend
        config = config if config is not None else TrainConfig()
        groups = check_training_groups(trajectory_groups, config)
        async with self._train_lock:
            step = await backend.get_step(self.run)
            await self._repair_training_row(step)
            await self.log(groups, split="train", step=step)
            effective, extra = await self._apply_lr_policy(config)
            if effective.kl_penalty_reference_step is not None:
                self._pinned.add(effective.kl_penalty_reference_step)
            self._record_config({"train": effective.to_json()})
            started = time.monotonic()
            bar = ProgressLine(
                f"train step {step} -> {step + 1}: gradient step", None, enabled=progress
            )
            samples: list[dict[str, float]] = []
            try:
                async for sample in backend.train(self.run, groups, effective):
                    samples.append(dict(sample))
                    loss = sample.get("loss/train", sample.get("loss"))
                    bar.advance(note="" if loss is None else f"loss={loss:.4g}")
            finally:
                bar.close()
            elapsed = time.monotonic() - started
            new_step = await self._advanced_from(step)
            row = _training_row(new_step, samples, {**extra, "time/step_trainer_s": elapsed})
            await self._report(row)
            self._step = new_step
            if verbose:
                logger.info("trained step %d -> %d in %.1fs", step, new_step, elapsed)
            return TrainResult(step=new_step, metrics=row.values)

    async def train_sft(
        self,
        trajectories: Iterable[object],
        config: TrainSFTConfig | None = None,
        *,
        verbose: bool = False,
        progress: bool | None = None,
    ) -> TrainResult:
        """Supervised fine-tuning as one step of the run (see core/sft.py): train on the
        conversations (Trajectory objects, OpenAI fine-tuning records or message lists) with
        the loss on assistant tokens, then record each gradient step under `sft/` and the
        means as the new step's training row. The new step is served like an RL step's."""
        backend = self.backend
        trainer = supervised_backend(backend)
        config = config if config is not None else TrainSFTConfig()
        conversations = conversations_from(trajectories)
        config.plan(len(conversations))  # a bad learning-rate list fails before any work
        async with self._train_lock:
            step = await backend.get_step(self.run)
            await self._repair_training_row(step)
            self._record_config({"train_sft": config.to_json()})
            started = time.monotonic()
            samples = await collect_updates(
                trainer,
                self.run,
                conversations,
                config,
                description=f"sft step {step} -> {step + 1}: gradient step",
                progress=progress,
            )
            elapsed = time.monotonic() - started
            new_step = await self._advanced_from(step)
            for sft_row in sft_rows(new_step, samples):
                await self._report(sft_row)
            row = _training_row(new_step, samples, {SFT_TIME_KEY: elapsed})
            await self._report(row)
            self._step = new_step
            if verbose:
                logger.info("fine-tuned step %d -> %d in %.1fs", step, new_step, elapsed)
            return TrainResult(step=new_step, metrics=row.values)

    async def export(
        self, out_dir: str, *, step: int | None = None, format: ExportFormat = "merged"
    ) -> str:
        """Write step `step` (latest when None) into the new folder `out_dir`: "merged" a
        Hugging Face model directory that `transformers` loads without arthex, "peft" a PEFT
        adapter directory (LoRA runs). Returns the folder."""
        if format not in ("peft", "merged"):
            raise InvalidInputError(f"format must be 'peft' or 'merged', got {format!r}")
        backend = self.backend
        if Capability.EXPORT not in backend.capabilities or not isinstance(backend, ModelExporter):
            raise UnsupportedCapability(
                "export",
                type(backend).__name__,
                "Export needs the checkpoints' files: with LocalBackend call model.export; a "
                "training server's runs are exported on the server (`arthex export`); a Tinker "
                "run's weights live in the Tinker service",
            )
        return await backend.export(self.run, out_dir, step=step, format=format)

    async def _advanced_from(self, step: int) -> int:
        new_step = await self.backend.get_step(self.run)
        if new_step != step + 1:
            raise BackendError(
                f"{type(self.backend).__name__} reported step {new_step} after training step "
                f"{step}; a train call must advance the step by exactly one"
            )
        return new_step

    async def _apply_lr_policy(self, config: TrainConfig) -> tuple[TrainConfig, dict[str, float]]:
        if not config.scale_learning_rate_by_reward_std_dev:
            return config, {}
        window = config.lr_multiplier_window
        policy = self._lr_policies.get(window)
        if policy is None:
            policy = RewardStdDevPolicy(window)
            (await self._history_index()).subscribe(REWARD_STD_DEV_KEY, policy)
            self._lr_policies[window] = policy
        multiplier = policy.multiplier(config.min_lr_multiplier, config.max_lr_multiplier)
        return (
            config.with_learning_rate(config.learning_rate * multiplier),
            {"loss/learning_rate_multiplier": multiplier},
        )

    async def _best_step(self, metric: str, direction: Direction) -> int | None:
        tracker = self._best_steps.get((metric, direction))
        if tracker is None:
            tracker = BestStep(direction)
            (await self._history_index()).subscribe(metric, tracker)
            self._best_steps[(metric, direction)] = tracker
        return tracker.step

    async def delete_checkpoints(
        self,
        best_checkpoint_metric: str = "val/reward",
        *,
        direction: Direction = "max",
        keep_last: int = 1,
        pinned: Collection[int] = (),
        dry_run: bool = False,
    ) -> RetentionDecision:
        """Keep the latest `keep_last` steps, the best step by `best_checkpoint_metric`
        (`direction` "max" or "min"; ties go to the later step), pinned steps and KL reference
        steps; delete the other checkpoints. When the metric was never logged nothing is
        deleted and the decision says why. `dry_run` reports without deleting."""
        backend = self.backend
        latest = await backend.get_step(self.run)
        best = await self._best_step(best_checkpoint_metric, direction)
        existing = await backend.checkpoint_steps(self.run)
        decision = decide(
            best,
            latest=latest,
            metric=best_checkpoint_metric,
            direction=direction,
            keep_last=keep_last,
            pinned=set(pinned) | self._pinned,
        )
        if decision is None:
            reason = (
                f"{best_checkpoint_metric!r} was never logged for {self.run}, so the best "
                "checkpoint is unknown: nothing deleted"
            )
            logger.warning(reason)
            return RetentionDecision(
                keep=frozenset(existing),
                best_step=None,
                metric=best_checkpoint_metric,
                reason=reason,
                dry_run=dry_run,
            )
        remaining = frozenset(s for s in existing if s in decision.keep)
        if dry_run:
            return attrs.evolve(
                decision,
                keep=remaining,
                deleted=tuple(s for s in existing if s not in decision.keep),
                dry_run=True,
            )
        deleted = await backend.delete_checkpoint_files(self.run, decision.keep)
        return attrs.evolve(decision, keep=remaining - set(deleted), deleted=tuple(sorted(deleted)))
