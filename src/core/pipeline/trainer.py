"""PipelineTrainer: rollouts keep running while the model trains, with bounded staleness, and a
crash at any point never trains a scenario twice or skips one.

Three kinds of task share one event loop:

- rollout workers (`num_rollout_workers`, workers.py) take the next scenario, wait until the
  served policy is fresh enough, run `rollout_fn(model, scenario, config)` and queue the group,
  stamped with its scenario's stream index and the step it was sampled from;
- the trainer (here) collects `min_batch_size`..`max_batch_size` groups, discarding the stale,
  the equal-reward and the failed ones (batch_collector.py), and runs one `model.train` on the rest
  while the workers keep sampling from the step it serves;
- an evaluator (evaluation.py) runs `eval_fn(model, step, config)` on chosen steps.

The backend serves step N while N -> N+1 trains and switches to N+1 when it is durable (new
requests get N+1, requests in flight finish on N). The off-policy correction is the loss's:
CISPO and PPO weigh each token by the ratio of the new policy's probability to the sampler's
logprob carried by the Choice, so groups a few steps old train correctly.

Exactly once: see core/pipeline_record.py (what is recorded) and resume.py (how an
interrupted update is settled). The record is saved before each update (which also records
the one before as done), when an evaluation ends and when the run ends; scenarios in flight at
a crash are pending in it and sampled again on resume.

The history is the authoritative ledger of discards too: a scenario discarded while a batch is
collected is held (pending, in the record) until the update it precedes carries it in
`in_flight`, and is recorded as discarded with that update's row; discards at the end of the
stream, which no update follows, get a row of their own at the last step the same way. So
after any crash the history's `discarded/*` counters and the record agree.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, Callable, Iterable, Mapping
from typing import Any, Generic

import attrs

from ...ports.training_backend import Capability, TrainingBackend
from ...ports.trajectory_store import PipelineStateStore
from .. import diagnostics
from ..config import LOSSES, LossName, TrainConfig
from ..errors import InvalidInputError, NotRegisteredError
from ..metrics import summarize
from ..pipeline_record import DISCARD_REASONS, InFlight, PipelineRecord
from ..trajectories import TrajectoryGroup
from .batch_collector import BatchCollector
from .evaluation import Evaluator
from .measures import (
    after_update,
    before_update,
    discard_metrics,
    group_tokens,
    policy_age_metrics,
    sampled_step,
    stream_index,
)
from .resume import settle
from .retention_strategy import RetentionContext, RetentionStrategy, checkpoint_infos
from .rollouts import ConfigT, EvalFn, ModelT, RolloutFn, ScenarioT
from .runtime_config import PipelineRuntimeConfig, PipelineTuning, runtime_settings, tuned_settings
from .status import PipelineStatus, check_interval
from .stream import ScenarioStream
from .workers import RolloutWorkers, StepGate

logger = logging.getLogger("arthex")

StepCallback = Callable[[int, Mapping[str, float | None]], None]


def _positive(name: str, value: object, *, allow_none: bool = False, least: int = 1) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InvalidInputError(f"{name} must be an integer >= {least}, got {value!r}")


class PipelineTrainer(Generic[ModelT, ScenarioT, ConfigT]):
    """`await PipelineTrainer(model, backend, rollout_fn, scenarios, config).train()`.

    Parameter names and meanings follow ART's PipelineTrainer where it has them:
    `num_rollout_workers` (16) concurrent scenarios; batches of `min_batch_size` (4) to
    `max_batch_size` (10 x min) groups; `queue_maxsize` finished groups waiting (default
    `max_steps_off_policy` x `max_batch_size`); `max_steps_off_policy` (4; None: no bound);
    `learning_rate`, `loss_fn`, `normalize_advantages`, `grad_accumulation_sequences`,
    `kl_penalty_coef` (reference: step 0, or `kl_penalty_step_lag` steps back) build each
    update's TrainConfig; `max_steps` updates from where this call starts (a resume after a
    crash continues toward the same last step); `eval_every_n_steps`, `eval_at_start`;
    `checkpoint_retention` keeps that many newest checkpoints (plus the best evaluated one and
    every step still in use) and deletes the rest as the run goes, None keeps all, and
    `save_checkpoint=False` means keep none but those; `checkpoint_retention_strategy` instead
    decides, every `checkpoint_retention_interval` steps, which of the checkpoints nothing uses
    to keep (retention_strategy.py: `keep_recent_and_top`); `resume` continues from the run's
    pipeline record, kept by `state_store` (default: the model's ports' `pipeline_state`,
    `pipeline_state.json` in the run directory). `on_step(step, metrics)` is called after
    each durable update. While it trains it shows each update: a progress line on a
    terminal, else one log line (logger "arthex", INFO) per update, at most one every
    `log_interval_seconds` (see status.py). `pipeline=PipelineRuntimeConfig(...)` gives the
    workers, batch bounds and queue size as one value instead (runtime_config.py), and
    `autotune=` something that decides that value when the trainer is built (ART's
    `PipelineAutotuneConfig(mode="profile")`: a saved tuner profile's settings).

    The scenario stream must be the same on resume (a list, a seeded generator); see stream.py.
    """

    def __init__(
        self,
        model: ModelT,
        backend: TrainingBackend,
        rollout_fn: RolloutFn[ModelT, ScenarioT, ConfigT],
        scenarios: Iterable[ScenarioT] | AsyncIterable[ScenarioT],
        config: ConfigT,
        eval_fn: EvalFn[ModelT, ConfigT] | None = None,
        *,
        state_store: PipelineStateStore | None = None,
        num_rollout_workers: int = 16,
        min_batch_size: int = 4,
        max_batch_size: int | None = None,
        queue_maxsize: int | None = None,
        max_steps_off_policy: int | None = 4,
        learning_rate: float = 1e-5,
        loss_fn: LossName = "cispo",
        normalize_advantages: bool = True,
        grad_accumulation_sequences: int | None = None,
        kl_penalty_coef: float = 0.0,
        kl_penalty_step_lag: int | None = None,
        max_steps: int | None = None,
        eval_every_n_steps: int = 20,
        eval_at_start: bool = True,
        save_checkpoint: bool = True,
        checkpoint_retention: int | None = None,
        checkpoint_retention_strategy: RetentionStrategy | None = None,
        checkpoint_retention_interval: int = 1,
        resume: bool = True,
        log_interval_seconds: float = 60.0,
        on_step: StepCallback | None = None,
        pipeline: PipelineRuntimeConfig | None = None,
        autotune: PipelineTuning | None = None,
    ) -> None:
        given = {
            "num_rollout_workers": num_rollout_workers,
            "min_batch_size": min_batch_size,
            "max_batch_size": max_batch_size,
            "queue_maxsize": queue_maxsize,
        }
        try:
            pipeline = tuned_settings(autotune, pipeline, given, model, max_steps_off_policy)
            settings = runtime_settings(pipeline, given)
        except ValueError as error:
            raise InvalidInputError(str(error)) from error
        num_rollout_workers = settings["num_rollout_workers"]
        min_batch_size, max_batch_size = settings["min_batch_size"], settings["max_batch_size"]
        queue_maxsize = settings["queue_maxsize"]
        self.pipeline = pipeline
        self.autotune = autotune
        _positive("num_rollout_workers", num_rollout_workers)
        _positive("min_batch_size", min_batch_size)
        _positive("max_batch_size", max_batch_size, allow_none=True, least=min_batch_size)
        _positive("queue_maxsize", queue_maxsize, allow_none=True)
        _positive("max_steps_off_policy", max_steps_off_policy, allow_none=True, least=0)
        _positive("max_steps", max_steps, allow_none=True, least=0)
        _positive("eval_every_n_steps", eval_every_n_steps, least=0)
        _positive("kl_penalty_step_lag", kl_penalty_step_lag, allow_none=True)
        _positive("checkpoint_retention", checkpoint_retention, allow_none=True, least=0)
        _positive("checkpoint_retention_interval", checkpoint_retention_interval)
        if checkpoint_retention_strategy is not None and (
            checkpoint_retention is not None or not callable(checkpoint_retention_strategy)
        ):
            raise InvalidInputError(
                "checkpoint_retention_strategy must be a callable, given without "
                "checkpoint_retention (the strategy decides which checkpoints to keep)"
            )
        if loss_fn not in LOSSES:
            raise InvalidInputError(f"loss_fn must be one of {LOSSES}, got {loss_fn!r}")
        if not callable(rollout_fn):
            raise InvalidInputError(f"rollout_fn must be callable, got {rollout_fn!r}")
        self.model = model
        self.backend = backend
        self.rollout_fn = rollout_fn
        self.config = config
        self.eval_fn = eval_fn
        self.num_rollout_workers = num_rollout_workers
        self.min_batch_size = min_batch_size
        self.max_batch_size = max_batch_size if max_batch_size is not None else 10 * min_batch_size
        self.max_steps_off_policy = max_steps_off_policy
        self.queue_maxsize = queue_maxsize or max(
            1, (max_steps_off_policy or 1) * self.max_batch_size
        )
        self.max_steps = max_steps
        self.eval_every_n_steps = eval_every_n_steps
        self.eval_at_start = eval_at_start
        self.keep_last = 0 if not save_checkpoint else checkpoint_retention
        self.retention_strategy = checkpoint_retention_strategy
        self.retention_interval = checkpoint_retention_interval
        self.resume = resume
        self.log_interval_seconds = check_interval(log_interval_seconds)
        self.on_step = on_step
        store = state_store if state_store is not None else model.ports.pipeline_state
        if store is None:
            raise InvalidInputError(
                f"model {model.run}'s ports keep no pipeline record: pass state_store= (a "
                "PipelineStateStore), or build the model with ports that have one"
            )
        self._state_store = store
        self._kl_lag = kl_penalty_step_lag
        self._base_config = TrainConfig(  # validates the training settings now
            learning_rate=learning_rate,
            loss_fn=loss_fn,
            scale_rewards=normalize_advantages,
            grad_accumulation_sequences=grad_accumulation_sequences,
            kl_penalty_coef=kl_penalty_coef,
        )
        self._stream = ScenarioStream(scenarios)
        self._queue: asyncio.Queue[Any] = asyncio.Queue(self.queue_maxsize)
        self._stop = asyncio.Event()
        self._save_lock = asyncio.Lock()
        self._evaluator: Evaluator | None = None
        self._started = False
        # the run's state, as the record will show it (set by _start)
        self._gate: StepGate  # both made by _start, once the run's step is known
        self._workers: RolloutWorkers
        self._batches: BatchCollector
        self._pending: set[int] = set()
        # discarded, as the history counts them; and discarded since the last pipeline row,
        # which the record keeps pending until a row holds them
        self._discarded: dict[str, set[int]] = {reason: set() for reason in DISCARD_REASONS}
        self._held: dict[str, set[int]] = {reason: set() for reason in DISCARD_REASONS}
        self._unlisted: dict[str, int] = {}  # counted by a record that did not list them
        self._record: PipelineRecord = PipelineRecord()  # as _start found it
        self._trained_groups = 0
        self._in_flight: InFlight | None = None
        self._stop_at: int | None = None
        self._totals: dict[str, float] = {}
        self._status: PipelineStatus | None = None  # made by _start, when the total is known

    # --- public ---------------------------------------------------------------------------

    async def train(self) -> None:
        """Run until `max_steps` updates are done, the stream is exhausted, or `request_stop`."""
        if self._started:
            raise InvalidInputError("a PipelineTrainer runs once; create a new one to continue")
        self._started = True
        await self._start()
        first = self._gate.step
        self._status = status = PipelineStatus(
            f"pipeline {self.model.run}: update",
            total=None if self._stop_at is None else max(self._stop_at - first, 0),
            log_interval_seconds=self.log_interval_seconds,
        )
        try:
            async with asyncio.TaskGroup() as tasks:
                producer = tasks.create_task(self._workers.run(), name="pipeline-rollouts")
                if self._evaluator is not None:
                    tasks.create_task(self._evaluator.run(), name="pipeline-eval")
                tasks.create_task(self._train_loop(producer), name="pipeline-train")
        except BaseExceptionGroup as group:
            # several workers often fail alike (a rollout_fn bug): report the first
            errors = _leaves(group)
            if errors:
                raise errors[0] from None
            raise
        finally:
            status.close()

    def request_stop(self) -> None:
        """Finish the update in progress, save the record and return from `train`; scenarios
        in flight stay pending and are sampled first by the next run."""
        self._stop.set()

    # --- start and resume -----------------------------------------------------------------

    async def _start(self) -> None:
        model = self.model
        name = type(self.backend).__name__
        self.backend.capabilities.require(Capability.TRAIN, name)  # before anything is written
        self.backend.capabilities.require(f"loss:{self._base_config.loss_fn}", name)
        if self._base_config.kl_penalty_coef > 0:
            self.backend.capabilities.require(Capability.KL_PENALTY, name)
        # read (and checked) before anything is written, registering included
        saved = await self._state_store.load(model.run) if self.resume else None
        try:
            registered = model.backend
        except NotRegisteredError:
            await model.register(self.backend)
            registered = model.backend
        if registered is not self.backend:
            raise InvalidInputError(
                f"model {model.run} is registered with another backend than the one given to "
                "the PipelineTrainer; pass the backend the model was registered with"
            )
        if saved is None:  # a new stream, from the model's current step
            record = PipelineRecord(step=await model.get_step())
        else:
            record = await settle(model, saved, self._config_for, self.num_rollout_workers)
        self._gate = StepGate(
            record.step, self.max_steps_off_policy, self.max_batch_size, self._stop
        )
        self._workers = RolloutWorkers(
            model=model,
            rollout_fn=self.rollout_fn,
            config=self.config,
            train_config=self._base_config,
            stream=self._stream,
            queue=self._queue,
            gate=self._gate,
            pending=self._pending,
            stop=self._stop,
            count=self.num_rollout_workers,
        )
        self._batches = BatchCollector(
            queue=self._queue,
            gate=self._gate,
            pending=self._pending,
            discarded=self._held,
            stop=self._stop,
            bound=self.max_steps_off_policy,
            min_batch=self.min_batch_size,
            max_batch=self.max_batch_size,
        )
        self._pending.update(record.pending)
        for reason in DISCARD_REASONS:
            self._discarded[reason].update(record.discarded[reason])
        self._trained_groups = record.trained_groups
        self._unlisted = dict(record.discarded_unlisted)
        self._record = record  # its evaluation fields are kept as they are with no eval_fn
        self._totals = dict(record.totals)
        if saved is not None and record.stop_at_step is not None:
            self._stop_at = record.stop_at_step
        elif self.max_steps is not None:
            self._stop_at = record.step + self.max_steps
        await self._stream.start(record.offset, record.pending)
        if self.eval_fn is not None:
            self._evaluator = Evaluator(
                model,
                self.eval_fn,
                self.config,
                due=record.evaluations_due,
                last_step=record.last_eval_step,
                evaluated=record.evaluated,
                best=record.best_eval,
                on_change=self._save,
            )
            await self._evaluator.settle()
            if self.eval_at_start:
                self._evaluator.schedule(record.step)
            elif saved is not None:
                # the last update may have made its step due after the record's last save
                self._evaluator.step_done(record.step, self.eval_every_n_steps)
        await self._save()
        logger.info(
            "%s: pipeline starts at step %d, scenario %d (%d to sample again)",
            model.run,
            record.step,
            record.offset,
            len(record.pending),
        )

    def _config_for(self, step: int) -> TrainConfig:
        config = self._base_config
        if config.kl_penalty_coef > 0:
            reference = 0 if self._kl_lag is None else max(0, step - self._kl_lag)
            config = attrs.evolve(config, kl_penalty_reference_step=reference)
        return config

    # --- training -------------------------------------------------------------------------

    async def _train_loop(self, producer: asyncio.Task[None]) -> None:
        try:
            await self._steps()
            if self._evaluator is not None:
                await self._evaluator.finish()
        finally:
            producer.cancel()
        await self._save()

    async def _steps(self) -> None:
        """Update after update until the leg's last step, the end of the stream or a stop. A
        stop while a batch is being collected leaves its groups pending, untrained."""
        step_started = time.monotonic()
        while not self._stop.is_set():
            if self._stop_at is not None and self._gate.step >= self._stop_at:
                self._stop_at = None  # this leg is done: the next train() call starts a new one
                return
            step = self._gate.step
            batch, _, ended = await self._batches.collect(step)
            if self._stop.is_set():
                return  # this batch's groups and discards stay pending
            counts = {r: len(self._held[r]) for r in DISCARD_REASONS}
            cum = {
                r: len(self._discarded[r]) + self._unlisted.get(r, 0) + counts[r]
                for r in DISCARD_REASONS
            }
            if batch:
                rollouts = self._workers.clock.take()
                before = before_update(
                    collect_s=time.monotonic() - step_started,
                    rollouts=rollouts,
                    discarded_step=counts,
                    discarded_cum=cum,
                    trained_cum=self._trained_groups,
                    dequeued=len(batch) + sum(counts.values()),
                    queue_depth=self._queue.qsize(),
                )
                before.update(policy_age_metrics(step, batch))
                if diagnostics.enabled():
                    before.update(self._diagnose(batch, before, counts["zero_variance"]))
                await self._update(step, batch, before, step_started, rollouts.tokens)
                step_started = time.monotonic()
            elif any(counts.values()):  # the stream ended on discards
                await self._log_discards(step, discard_metrics(counts, cum, self._trained_groups))
            if ended:
                self._stop_at = None
                return

    async def _update(
        self,
        step: int,
        batch: list[TrajectoryGroup],
        before: dict[str, float],
        step_started: float,
        rollout_tokens: int,
    ) -> None:
        indices = [stream_index(group) for group in batch]
        flight = InFlight(
            step=step,
            indices=[i for i in indices if i is not None],
            metrics=before,
            discarded=self._take_held(),
        )
        self._pending.difference_update(flight.indices)
        self._in_flight = flight
        await self._save()  # the update's intent is durable before the update starts
        await self._gate.update_started(step, [sampled_step(group) for group in batch])
        started = time.monotonic()
        result = await self.model.train(batch, self._config_for(step), progress=False)
        train_s = time.monotonic() - started
        await self._gate.update_done(result.step)
        row = after_update(
            before,
            wall_s=time.monotonic() - step_started,
            train_s=train_s,
            workers=self.num_rollout_workers,
            batch_tokens=group_tokens(batch),
            rollout_tokens=rollout_tokens,
            totals=self._totals,
        )
        await self.model.log(None, split="train", step=result.step, metrics=row)
        # Done, but not saved now: the next save (the next update's intent, an evaluation's
        # end, the run's end) records it, and until then a resume finds the update durable
        # and its row written (resume.py), so a save here would only add an fsync per step.
        self._trained_groups += len(batch)
        self._discard(flight)
        self._in_flight = None
        if self._evaluator is not None:
            self._evaluator.step_done(result.step, self.eval_every_n_steps)
        await self._retain()
        shown = {**summarize(batch, "train"), **result.metrics, **row}
        if self._status is not None:
            self._status.update_done(result.step, len(batch), shown)
        if self.on_step is not None:
            self.on_step(result.step, shown)

    def _diagnose(
        self, batch: list[TrajectoryGroup], before: Mapping[str, float], equal: int
    ) -> dict[str, float]:
        """The pipeline's own diagnostics (core/diagnostics.py): staleness at its bound for
        several updates in a row; and the equal-reward groups it discarded count toward the
        model's share of groups with no spread."""
        found = self.model.run_diagnostics
        found.discarded(equal)
        age = before.get("offpolicy/max_policy_age_steps")
        steps, findings = found.staleness(age, self.max_steps_off_policy)
        self.model.diagnose(findings)
        return {diagnostics.STALENESS_KEY: steps}

    def _take_held(self) -> dict[str, set[int]]:
        held = {reason: set(indices) for reason, indices in self._held.items()}
        for indices in self._held.values():
            indices.clear()
        return held

    def _discard(self, flight: InFlight) -> None:
        """Its row is written: its discards are the history's."""
        for reason in DISCARD_REASONS:
            self._discarded[reason].update(flight.discarded[reason])

    async def _log_discards(self, step: int, row: dict[str, float]) -> None:
        """The discards no update follows (the stream ended on them), in a row at `step`: the
        record carries them in `in_flight` until the row is written (resume.py settles it)."""
        flight = InFlight(step=step, indices=(), metrics=row, discarded=self._take_held())
        self._in_flight = flight
        await self._save()
        await self.model.log(None, split="train", step=step, metrics=row)
        self._discard(flight)
        self._in_flight = None

    async def _retain(self) -> None:
        """Delete checkpoints beyond `checkpoint_retention`, or those the retention strategy
        does not keep, never one still in use."""
        strategy = self.retention_strategy
        if strategy is not None and self._gate.step % self.retention_interval:
            return
        if self.keep_last is None and strategy is None:
            return
        steps = await self.backend.checkpoint_steps(self.model.run)
        keep = set(steps[-self.keep_last :]) if self.keep_last else set()
        keep |= {self._gate.step} | {s for s, n in self._workers.in_use.items() if n > 0}
        if self._base_config.kl_penalty_coef > 0:
            # the next update's reference and, with a lag, every step after it: each one is the
            # reference of an update to come
            step = self._gate.step
            first = self._config_for(step).kl_penalty_reference_step or 0
            keep |= {first} if self._kl_lag is None else set(range(first, step + 1))
        if self._evaluator is not None:
            keep |= self._evaluator.steps_in_use()
        if strategy is not None:
            shown = checkpoint_infos(
                set(steps) - keep,
                await self.model.history(),
                self.model.get_inference_name,
                evaluated=self._evaluator.evaluated if self._evaluator else self._record.evaluated,
            )
            context = RetentionContext(current_step=self._gate.step, checkpoints=shown)
            keep |= set(strategy(context)) & {c.step for c in shown}
        if set(steps) - keep:
            await self.backend.delete_checkpoint_files(self.model.run, sorted(keep))

    # --- the record -----------------------------------------------------------------------

    def _snapshot(self) -> PipelineRecord:
        evaluator = self._evaluator
        held = [i for indices in self._held.values() for i in indices]
        return PipelineRecord(
            step=self._gate.step,
            offset=self._stream.position,
            pending=[*self._pending, *held],
            discarded=self._discarded,
            trained_groups=self._trained_groups,
            in_flight=self._in_flight,
            stop_at_step=self._stop_at,
            evaluations_due=evaluator.due if evaluator else self._record.evaluations_due,
            last_eval_step=evaluator.last_step if evaluator else self._record.last_eval_step,
            best_eval=evaluator.best if evaluator else self._record.best_eval,
            totals=self._totals,
            discarded_unlisted=self._unlisted,
            evaluated=evaluator.evaluated if evaluator else self._record.evaluated,
        )

    async def _save(self) -> None:
        async with self._save_lock:  # each save writes the state as it is when it runs
            await self._state_store.save(self.model.run, self._snapshot())


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The errors inside nested task-group errors, cancellations left out."""
    found: list[BaseException] = []
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            found.extend(_leaves(error))
        elif not isinstance(error, asyncio.CancelledError):
            found.append(error)
    return found
