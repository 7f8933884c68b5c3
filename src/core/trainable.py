"""TrainableModel: a model a backend trains. `register` (taking the run's lease), `train` (one
RL update: the batch at step N, the update, its metrics at N+1), the policies that read the
ledger (the learning-rate multiplier, which checkpoints to keep) and `delete_checkpoints`.
Supervised fine-tuning and export are in `fine_tuning`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
from pydantic import BaseModel as PydanticModel

from ..ports.training_backend import (
    Capability,
    ExportFormat,
    HeldLease,
    InferenceEndpoint,
    RankStacks,
    StepMetricsSource,
    TrainingBackend,
)
from . import diagnostics, fine_tuning, lease_book, pruning
from .capture.endpoints import register_endpoint
from .capture.training import training_groups
from .config import TrainConfig
from .errors import (
    BackendError,
    BaseModelChangedError,
    InvalidInputError,
    NotRegisteredError,
    RunBusyError,
)
from .identity import ModelSpec, step_name, validate_name
from .inference_target import serving_pin
from .lr_policy import REWARD_STD_DEV_KEY, RewardStdDevPolicy
from .metrics import (
    MetricsRow,
)
from .model import Model, ModelPorts, TrainResult, config_json
from .progress import ProgressLine
from .retention import BestStep, Direction, RetentionDecision
from .sft import TrainSFTConfig
from .training_row import (
    GRADIENT_STEPS_KEY,
    TRAINER_SECONDS_KEY,
    IdleSteps,
    PendingBatch,
    superseding_row,
    training_values,
)
from .trajectories import TrajectoryGroup
from .validation import check_finite_values, check_training_groups
from .watchdog import WATCHDOG, watchdog_seconds

if TYPE_CHECKING:
    from openai import AsyncOpenAI


logger = logging.getLogger("arthex")


class TrainableModel(Model):
    """A model trained by a backend: `register`, then `train`, `log`, `delete_checkpoints`."""

    def __init__(
        self,
        *,
        name: str,
        project: str,
        base_model: str,
        ports: ModelPorts,
        base_path: str = ".art",
        config: Mapping[str, Any] | PydanticModel | None = None,
        run_name: str | None = None,
    ) -> None:
        super().__init__(
            name=name,
            project=project,
            ports=ports,
            base_path=base_path,
            config=config,
            run_name=run_name,
        )
        self._leases = ports.leases
        self._lease: HeldLease | None = None
        self._lease_finalizer: weakref.finalize[[], TrainableModel] | None = None
        if not isinstance(base_model, str) or not base_model:
            raise InvalidInputError(
                f"base_model must be a model id or directory, got {base_model!r}"
            )
        self.base_model = base_model
        if self.name != self.run.name:  # the name is served (`{name}@{step}`): one segment
            validate_name(self.name, "name")
        self._backend: TrainingBackend | None = None
        self._endpoint: InferenceEndpoint | None = None
        self._step: int | None = None
        self._train_lock = asyncio.Lock()
        self._pending: PendingBatch | None = None
        self._pinned: set[int] = set()
        self._diagnostics = diagnostics.RunDiagnostics()  # this run's, never shared
        self._idle = IdleSteps()
        self._unwatch: weakref.finalize[[], TrainableModel] | None = None
        # the served-step check's own client, bound to the loop it was made on (never the
        # user's `openai_client()`, whose connections must not be tied to a train call's loop)
        self._lister: tuple[weakref.ref[asyncio.AbstractEventLoop], AsyncOpenAI] | None = None

    @property
    def trainable(self) -> bool:
        return True

    async def close(self) -> None:
        """Close the cached inference client, give the run's lease back, then close the
        reporters (not the backend: it may serve other models; close it yourself). Closing
        the backend, or dropping the model, gives the lease back too."""
        await self._close_client()
        self._stop_watching()
        await self._release_lease()
        await super().close()

    def spec(self) -> ModelSpec:
        return ModelSpec(
            run=self.run,
            base_model=self.base_model,
            trainable=True,
            base_path=self.base_path,
            config=config_json(self.config),
            served_as=self.name,
        )

    @property
    def backend(self) -> TrainingBackend:
        if self._backend is None:
            raise NotRegisteredError(
                f"model {self.run} has no backend yet; call `await model.register(backend)` first"
            )
        return self._backend

    async def train_sft(
        self,
        trajectories: Iterable[object],
        config: TrainSFTConfig | Mapping[str, Any] | None = None,
        *,
        verbose: bool = False,
        progress: bool | None = None,
    ) -> TrainResult:
        """Supervised fine-tuning as one step of the run (see core/sft.py): train on the
        conversations (Trajectory objects, OpenAI fine-tuning records or message lists) with
        the loss on assistant tokens, then record each gradient step under `sft/` and the
        means as the new step's training row. The new step is served like an RL step's.
        `config` is a TrainSFTConfig or a mapping of its fields."""
        checked = TrainSFTConfig.model_validate(config) if config is not None else TrainSFTConfig()
        return await fine_tuning.train_sft(
            self, trajectories, checked, verbose=verbose, progress=progress
        )

    async def export(
        self, out_dir: str, *, step: int | None = None, format: ExportFormat = "merged"
    ) -> str:
        """Write step `step` (latest when None) into the new folder `out_dir`: "merged" a
        Hugging Face model directory that `transformers` loads without arthex, "peft" a PEFT
        adapter directory (LoRA runs). Returns the folder."""
        return await fine_tuning.export(self, out_dir, step=step, format=format)

    async def register(self, backend: TrainingBackend) -> None:
        """Hand the model to a backend: it prepares training and serving for it.

        With a backend whose checkpoints other processes see (`Capability.ONE_TRAINER`), the
        run's lease is taken first, before anything is written: a second trainer on the run
        gets RunBusyError naming the first (for another model of this process: where it was
        registered). The lease is held until `close`, until the backend is closed, or until
        the model is garbage-collected.

        A run keeps the base model it was trained from: registering a trained run with
        another `base_model` raises BaseModelChangedError before anything is written. A run
        with nothing trained yet (no row past step 0 in its history) may be re-pointed."""
        spec = self.spec()
        seconds = watchdog_seconds()  # a bad ARTHEX_WATCHDOG_S fails before anything is written
        diagnostics.enabled()  # and so does a bad ARTHEX_DIAGNOSTICS
        repointed_from = await self._check_base_model()
        took = await self._take_lease(backend, lease_book.caller_site())
        try:
            with WATCHDOG.activity("backend.register"):
                endpoint = await backend.register(spec)
            if repointed_from is not None:  # said once the backend took it (Tinker refuses)
                logger.warning(
                    "%s had nothing trained yet: its base model changed from %r to %r",
                    self.run,
                    repointed_from,
                    self.base_model,
                )
            remote_of = getattr(backend, "remote_of", None)  # a backend that trains elsewhere
            if callable(remote_of):
                spec = attrs.evolve(spec, remote=remote_of(self.run))
            await self._store.write_model_spec(spec)
        except BaseException:
            if took:
                await self._release_lease()
            raise
        self._backend = backend
        self._watch(backend, seconds)
        if self._lease is not None:
            lease_book.holds(self, backend)
        self._endpoint = endpoint
        await self._close_client()
        if endpoint is not None:
            self.inference_base_url = endpoint.base_url
            self.inference_api_key = endpoint.api_key
        if endpoint is not None:
            register_endpoint(endpoint.base_url)  # capture scopes watch it from now on
        self._step = await backend.get_step(self.run)
        async with self._train_lock:
            await self._repair_training_row(self._step)

    def _watch(self, backend: TrainingBackend, seconds: float) -> None:
        """Attach this run to the hang watchdog (core/watchdog.py): its reports go to the run's
        `diagnostics/` folder, with the backend's rank stacks when it has ranks. Detached on
        `close`, when the backend closes, and when the model is garbage-collected."""
        self._stop_watching()
        run = self.run
        writer = self.ports.reports
        ranks = backend.rank_stacks if isinstance(backend, RankStacks) else None
        detach = WATCHDOG.attach(
            str(run),
            seconds,
            None if writer is None else (lambda name, text: writer(run, name, text)),
            None if ranks is None else (lambda: ranks(run)),
        )
        # the finalizer holds the detaching function, not the model
        self._unwatch = weakref.finalize(self, detach)

    def _stop_watching(self) -> None:
        unwatch, self._unwatch = self._unwatch, None
        if unwatch is not None:
            unwatch()

    async def _check_base_model(self) -> str | None:
        """Refuse another base model for a run that has trained; only reads. The recorded
        base model a run with nothing trained is re-pointed from, else None."""
        recorded = await self._store.read_model_spec(self.run)
        before = None if recorded is None else recorded.get("base_model")
        if not isinstance(before, str) or not before or before == self.base_model:
            return None
        last = (await self._history_index()).last_step
        if last is not None and last >= 1:
            raise BaseModelChangedError(self.run, before, self.base_model)
        return before

    async def _take_lease(self, backend: TrainingBackend, site: str) -> bool:
        """Take the run's lease if this backend needs one and it is not held yet; True when
        this call took it. Held by another model of this process: once more after collecting
        garbage (that model may be unreachable already, caught in a reference cycle)."""
        leases = self._leases
        if leases is None or self._lease is not None:
            return False
        if Capability.ONE_TRAINER not in backend.capabilities:
            return False
        try:
            lease = await leases.acquire(self.run, registered_at=site)
        except RunBusyError:
            if not lease_book.collect_if_held_here(self.run):
                raise
            lease = await leases.acquire(self.run, registered_at=site)
        self._lease = lease
        # The finalizer holds the lease, not the model: a model dropped without `close` is
        # collected (cycles included) and gives the run back.
        self._lease_finalizer = weakref.finalize(self, lease.release_now)
        return True

    async def release_lease_from(self, backend: object) -> None:
        """The backend this model is registered on is closing: give the run's lease back (a
        later `register` takes it again)."""
        if backend is self._backend:
            self._stop_watching()
            await self._release_lease()

    async def _release_lease(self) -> None:
        lease, self._lease = self._lease, None
        finalizer, self._lease_finalizer = self._lease_finalizer, None
        if finalizer is not None:
            finalizer.detach()
        if lease is not None:
            lease_book.let_go(self)
            await lease.release()

    async def _retire_untrained(self, step: int) -> None:
        """A new batch is about to be logged at `step`, the newest checkpoint: batch rows
        already at `step` came from updates that never saved step+1. Retire them with a marker
        row (training_row.SUPERSEDED_KEY), so the step shows only the batch that trains."""
        count = (await self._history_index()).untrained_batches(step)
        if not count:
            return
        logger.warning(
            "%s: %d train-split row(s) at step %d were logged by an update that never saved "
            "step %d; marking them superseded by this update's",
            self.run,
            count,
            step,
            step + 1,
        )
        await self._report(superseding_row(step, count), mirror=False)

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
        values = training_values(samples, {TRAINER_SECONDS_KEY: None})
        values.update(await self._running_totals(values))
        await self._report(MetricsRow(step=step, values=values))

    async def get_step(self) -> int:
        """The newest durable checkpoint's step, as the backend knows it."""
        self._step = await self.backend.get_step(self.run)
        return self._step

    def get_inference_name(self, step: int | None = None) -> str:
        """The name to send for `step`: registered, the endpoint's name of the model (its
        `name`) at the step, `{name}@{step}` (the endpoint may name steps its own way), the
        latest step this model knows of when none is given; unregistered, `name`, or
        `{name}@{step}`. The run's files go by `run_name`; `name` is what inference calls it.
        Inside `pinned_serving(name, step)` the pinned step is the one named when none is
        given (and a pinned served name is sent for that step)."""
        if self._backend is None:
            return super().get_inference_name(step)
        pin = serving_pin(self.name)
        if pin is not None and pin.served_name is not None and step in (None, pin.step):
            return pin.served_name
        if step is None:
            step = pin.step if pin is not None else self._step if self._step is not None else 0
        if self._endpoint is None:
            return step_name(self.name, step)
        return self._endpoint.name_at(step)

    def _served_name(self) -> str | None:
        return self.get_inference_name() if self._endpoint is not None else None

    def openai_client(self) -> AsyncOpenAI:
        """An `openai.AsyncOpenAI` for the backend's endpoint (cached per registration and
        event loop)."""
        if self._endpoint is None:
            raise NotRegisteredError(
                f"model {self.run} has no inference endpoint: register it with a backend that "
                "serves (e.g. LocalBackend) first"
            )
        if self._endpoint.follow_loop is not None:
            self._endpoint.follow_loop()  # a server left on an ended loop serves from this one
        return self._client_for(self._endpoint.base_url, self._endpoint.api_key)

    async def train(
        self,
        trajectory_groups: Iterable[TrajectoryGroup],
        config: TrainConfig | Mapping[str, Any] | None = None,
        *,
        verbose: bool = False,
        progress: bool | None = None,
        log_groups: bool = True,
    ) -> TrainResult:
        """One RL update: log the groups at step N, train, record the metrics at N+1.

        `config` is a TrainConfig or a mapping of its fields (`{"learning_rate": 1e-5}`);
        None trains with TrainConfig's defaults.

        `progress` shows a line per gradient step on a terminal (None: only when stderr is a
        terminal; False: never). `log_groups=False` skips logging the groups at N: for groups
        already logged there (read back with `logged_groups` to finish an update a crash
        interrupted), so they are not stored twice."""
        checked = TrainConfig.model_validate(config) if config is not None else None
        return await self._train(trajectory_groups, checked, log_groups, verbose, progress)

    async def train_for_backend(
        self,
        backend: object,
        trajectory_groups: Iterable[TrajectoryGroup],
        config: TrainConfig,
        *,
        verbose: bool = False,
    ) -> TrainResult:
        """ART's `backend.train(model, groups, ...)`: train and record the metrics at N+1, but
        leave logging the groups to the script, as ART does (see `training_record`)."""
        if backend is not self.backend:
            raise InvalidInputError(
                f"model {self.run} is registered with {type(self.backend).__name__}, not with "
                f"the {type(backend).__name__} asked to train it; call train on its own backend"
            )
        return await self._train(trajectory_groups, config, False, verbose, None)

    async def _train(
        self,
        trajectory_groups: Iterable[TrajectoryGroup],
        config: TrainConfig | None,
        log_groups: bool,
        verbose: bool,
        progress: bool | None,
    ) -> TrainResult:
        backend = self.backend
        config = config if config is not None else TrainConfig()
        groups = check_training_groups(trajectory_groups, config)
        check_finite_values(groups, training=True)
        backend.capabilities.check(config, type(backend).__name__)  # before anything is written
        diagnosing = diagnostics.enabled()
        found = diagnostics.check_trainable(training_groups(groups, config)) if diagnosing else None
        async with self._train_lock:
            step = await backend.get_step(self.run)
            await self._repair_training_row(step)
            batch: PendingBatch | None = None
            if log_groups:
                batch = self._pending
                if batch is None or not batch.retried_by(step, groups):
                    await self._retire_untrained(step)
                    batch = self._pending = PendingBatch(step, list(groups))
                await self._log(groups, "train", None, step, batch)
                self._trained.logged_by_train(step, groups)
            effective, extra = await self._apply_lr_policy(config)
            trained = training_groups(groups, effective)
            if diagnosing:
                extra.update(self._diagnose_batch(trained, found))
            if effective.kl_penalty_reference_step is not None:
                self._pinned.add(effective.kl_penalty_reference_step)
            self._record_config({"train": effective.to_json()})
            started = time.monotonic()
            bar = ProgressLine(
                f"train step {step} -> {step + 1}: gradient step", None, enabled=progress
            )
            samples: list[dict[str, float]] = []
            try:
                with WATCHDOG.activity("train"):
                    async for sample in backend.train_steps(self.run, trained, effective):
                        WATCHDOG.beat()
                        samples.append(dict(sample))
                        loss = sample.get("loss/train", sample.get("loss"))
                        bar.advance(note="" if loss is None else f"loss={loss:.4g}")
            finally:
                bar.close()
            elapsed = time.monotonic() - started
            new_step = await self._advanced_from(step)
            if diagnosing:
                extra.update(await self._diagnose_serving(new_step))
            values = training_values(samples, {**extra, TRAINER_SECONDS_KEY: elapsed})
            said = self._idle.after(step, new_step, values[GRADIENT_STEPS_KEY] or 0.0, trained)
            # a cause the caller said it expects (the demo's solved task) is not warned about
            if said is not None and self._idle.cause not in self._diagnostics.expected:
                logger.warning("%s: %s", self.run, said)
            values.update(await self._running_totals(values))
            row = MetricsRow(step=new_step, values=values)
            batch_row = None if batch is None else batch.row
            await self._history.report(self.run, row)
            if batch is not None and batch_row is not None:  # it trained: mirror it now
                await self._report_samples("train", step, batch.groups)
                await self._mirror(batch_row)
            await self._mirror(row)
            self._trained.trained(new_step, row.values)
            self._pending = None
            self._step = new_step
            if verbose:
                logger.info("trained step %d -> %d in %.1fs", step, new_step, elapsed)
            return TrainResult(step=new_step, metrics=row.values)

    def _diagnose_batch(
        self, groups: list[TrajectoryGroup], found: diagnostics.Trainability | None
    ) -> dict[str, float]:
        values, findings = self._diagnostics.batch(groups, found)
        self._warn(findings)
        return values

    async def _diagnose_serving(self, step: int) -> dict[str, float]:
        """Whether the endpoint serves the step just trained (a server not reloaded keeps
        sampling the old policy). Only asked of an endpoint this model has; a server that
        cannot be asked is not a finding."""
        endpoint = self._endpoint
        if endpoint is None:
            return {}
        try:
            listed = await self._listing_client(endpoint).models.list()
            names = [entry.id for entry in listed.data]
        except Exception as exc:  # a diagnostic never fails the update
            logger.debug("could not list the models served at %s: %s", endpoint.base_url, exc)
            return {}
        steps = ((name, endpoint.step_of(name)) for name in names)
        names = [name if at is None else step_name(endpoint.model_name, at) for name, at in steps]
        served = diagnostics.served_step(names, endpoint.model_name)
        if served is None:
            return {}  # the endpoint names this run's steps otherwise: nothing to compare
        lag, findings = self._diagnostics.served(step, served, endpoint.base_url)
        self._warn(findings)
        return {diagnostics.SERVED_LAG_KEY: lag}

    def _listing_client(self, endpoint: InferenceEndpoint) -> AsyncOpenAI:
        loop = asyncio.get_running_loop()
        held = self._lister
        if held is None or held[0]() is not loop:
            from openai import AsyncOpenAI  # the client class, not only the types

            client = AsyncOpenAI(
                base_url=endpoint.base_url,
                api_key=endpoint.api_key,
                timeout=10.0,
                max_retries=0,
                # no pooled connection outlives the call, so none is left on a closed loop
                default_headers={"Connection": "close"},
            )
            held = self._lister = (weakref.ref(loop), client)
        return held[1]

    async def _close_client(self) -> None:
        held, self._lister = self._lister, None
        if held is not None and held[0]() is asyncio.get_running_loop():
            await held[1].close()
        await super()._close_client()

    def diagnose(self, findings: Iterable[diagnostics.Finding]) -> None:
        """Log each finding once per run (its cause), as a warning naming the run."""
        self._warn(findings)

    def _warn(self, findings: Iterable[diagnostics.Finding]) -> None:
        for finding in findings:
            if self._diagnostics.first_time(finding.cause):
                logger.warning("%s: %s", self.run, finding.message)

    @property
    def run_diagnostics(self) -> diagnostics.RunDiagnostics:
        """What this run's in-run diagnostics remember (the causes already warned about)."""
        return self._diagnostics

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
        index = await self._history_index()  # first: catching up may drop stale policies
        window = config.lr_multiplier_window
        policy = self._lr_policies.get(window)
        if policy is None:
            policy = RewardStdDevPolicy(window)
            index.subscribe(REWARD_STD_DEV_KEY, policy)
            self._lr_policies[window] = policy
        multiplier = policy.multiplier(config.min_lr_multiplier, config.max_lr_multiplier)
        return (
            config.with_learning_rate(config.learning_rate * multiplier),
            {"loss/learning_rate_multiplier": multiplier},
        )

    async def _best_step(self, metric: str, direction: Direction) -> int | None:
        index = await self._history_index()  # first: catching up may drop stale trackers
        tracker = self._best_steps.get((metric, direction))
        if tracker is None:
            tracker = BestStep(direction)
            index.subscribe(metric, tracker)
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
        deleted and the decision says why. `dry_run` reports without deleting (the use case
        `pruning.delete_checkpoints`, which `arthex prune` calls too)."""
        backend = self.backend
        best = await self._best_step(best_checkpoint_metric, direction)
        with WATCHDOG.activity("backend.delete_checkpoints"):
            decision = await pruning.delete_checkpoints(
                backend,
                self.run,
                best,
                metric=best_checkpoint_metric,
                direction=direction,
                keep_last=keep_last,
                pinned=set(pinned) | self._pinned,
                dry_run=dry_run,
            )
        if decision.best_step is None:
            logger.warning(decision.reason)
        return decision
