"""The use cases: log, train, delete checkpoints, serve. All state management lives here.

A `Model` takes its ports explicitly; the public `arthex.Model` fills in the defaults from the
composition root. Backends receive identities and data, never this object.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
from pydantic import BaseModel as PydanticModel

from ..ports.metrics_reporter import (
    ConfigRecorder,
    MetricsHistory,
    MetricsReporter,
    SampleRecorder,
    Startable,
)
from ..ports.training_backend import RunLeases
from ..ports.trajectory_store import PipelineStateStore, RunStateStore, TrajectoryStore
from .errors import (
    CorruptDataError,
    InvalidInputError,
    InvalidNameError,
)
from .history_index import HistoryIndex
from .identity import ModelSpec, RunRef, validate_name
from .inference_target import InferenceTarget
from .lr_policy import RewardStdDevPolicy
from .metrics import (
    MetricsRow,
    computed_summary,
    cumulative_key,
    custom_summary,
    merge_metrics,
    qualify,
)
from .retention import BestStep, Direction
from .run_state import RunStateMixin
from .training_record import TrainingRecord
from .training_row import (
    UPDATE_BATCH_KEY,
    PendingBatch,
    trained_rows,
)
from .trajectories import Trajectory, TrajectoryGroup
from .validation import check_finite_values, groups_from_log_input

logger = logging.getLogger("arthex")

LogInput = Iterable[TrajectoryGroup] | Iterable[Trajectory | BaseException] | TrajectoryGroup


@attrs.frozen
class TrainResult:
    """The step the update produced and the training metrics recorded at it."""

    step: int
    metrics: Mapping[str, float | None]


def _reporters(reporters: Iterable[MetricsReporter]) -> tuple[MetricsReporter, ...]:
    return tuple(reporters)


@attrs.frozen
class ModelPorts:
    """What a model works through, built once (the composition root's `model_ports`, or by
    hand when embedding arthex): the three roles' adapters and their facets. `store` keeps the
    trajectories and the model's card (`state`, the run-state facet, sits beside it);
    `reporter` is the ledger the model reports to and its policies read, `mirrors` the
    reporters that copy its rows (wandb); `leases` guard a backend's checkpoints (one trainer
    per run); `pipeline_state` keeps a PipelineTrainer's record of its scenario stream;
    `reports` writes a run's diagnostics reports (`(run, name, text) -> where`: the hang
    watchdog's stack dumps, `{run}/diagnostics/`). The backend, the third role, is given at
    `register`."""

    store: TrajectoryStore
    reporter: MetricsHistory
    mirrors: tuple[MetricsReporter, ...] = attrs.field(default=(), converter=_reporters)
    state: RunStateStore | None = None
    leases: RunLeases | None = None
    pipeline_state: PipelineStateStore | None = None
    reports: Callable[[RunRef, str, str], str] | None = None


class Model(RunStateMixin, InferenceTarget):
    """A model whose evaluations are logged; no backend needed. Its step is always 0.

    `name` is what the model is called; the run is stored under `run_name` (default: the
    name). `config` is any JSON-able mapping or pydantic model (kept as given, stored as
    JSON). The inference fields point a prompted model at an OpenAI-compatible service.
    """

    def __init__(
        self,
        *,
        name: str,
        project: str,
        ports: ModelPorts,
        base_path: str = ".art",
        config: Mapping[str, Any] | PydanticModel | None = None,
        run_name: str | None = None,
        inference_base_url: str | None = None,
        inference_api_key: str | None = None,
        inference_model_name: str | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidNameError(f"name must be a non-empty string, got {name!r}")
        self.run = RunRef(project=project, name=run_name if run_name is not None else name)
        self._name = name
        self.ports = ports
        self._state_store = ports.state
        self._init_inference(inference_base_url, inference_api_key, inference_model_name)
        self.base_path = base_path
        self.config: Any = config if config is not None else {}
        config_json(self.config)  # a config that cannot be recorded fails here, not later
        self._trained = TrainingRecord()
        self._store = ports.store
        self._history = ports.reporter
        self._mirrors = ports.mirrors
        self._index: HistoryIndex | None = None
        self._lr_policies: dict[int | None, RewardStdDevPolicy] = {}
        self._best_steps: dict[tuple[str, Direction], BestStep] = {}
        self._config_recorded = False
        self._mirrors_started = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def run_name(self) -> str:
        """The run's directory and history: `{base_path}/{project}/models/{run_name}`."""
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
            config=config_json(self.config),
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
        return await self._log(trajectories, split, metrics, step, None)

    async def _log(
        self,
        trajectories: LogInput | None,
        split: str,
        metrics: Mapping[str, float | int | bool | None] | None,
        step: int | None,
        batch: PendingBatch | None,
    ) -> MetricsRow | None:
        """`log`, remembering in `batch` which of its writes are done, so a retry of the same
        batch (after a failure further on) skips them instead of writing them twice."""
        validate_name(split, "split")
        groups = groups_from_log_input(trajectories)
        check_finite_values(groups, training=False)
        if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
            raise InvalidInputError(f"step must be an integer >= 0, got {step!r}")
        extra = qualify(dict(metrics or {}), split)
        if not groups and not extra:
            return None
        at = await self.get_step() if step is None else step
        if batch is None:  # ART's `backend.train` + `log(split="train")`: nothing twice
            extra = self._trained.not_yet_recorded(at, extra)
            groups = self._trained.not_yet_logged(groups, split)
            if not groups and not extra:
                return None
        values = merge_metrics(
            computed_summary(groups, split) if groups else {},
            ("trajectory or group", custom_summary(groups, split)),
            ("caller", extra),
        )
        if batch is not None:
            values[UPDATE_BATCH_KEY] = 1.0  # retired if its update never saves (training_row)
        MetricsRow(step=0, values=values)  # validates every value before anything else
        await self._start_mirrors()
        if batch is not None and batch.row is not None:
            row = batch.row  # written by the failed attempt this call retries
        else:
            values.update(await self._running_totals(values))
            row = MetricsRow(step=at, values=values)
        if groups and not (batch is not None and batch.part_written):
            await self._store.write(self.run, split, at, groups)
            if batch is not None:
                batch.part_written = True
            if batch is None:  # a batch's samples, like its row, wait for its update
                await self._report_samples(split, at, groups)
        if batch is None or batch.row is None:
            # A batch's row reaches the mirrors only once its update trained (`_train`): a
            # mirror cannot take back a row, the ledger can retire one (training_row).
            await self._report(row, mirror=batch is None)
            if batch is not None:
                batch.row = row
        return row

    async def _start_mirrors(self) -> None:
        """Start the mirrors that can be started (a wandb run) before the first write of the
        first call: a mirror that cannot start fails the call while nothing is written yet
        (fail fast, before paid work). Once started, a mirror only degrades, never raises."""
        if self._mirrors_started:
            return
        for mirror in self._mirrors:
            if isinstance(mirror, Startable):
                await mirror.start(self.run)
        self._mirrors_started = True

    async def _running_totals(self, values: Mapping[str, Any]) -> dict[str, float]:
        """ART's running totals of the row's per-step counts (`data/step_num_x` ->
        `data/cum/num_x`, `time/step_x_s` -> `time/cum/x_s`, `costs/x` -> `costs/cum/x`):
        the ledger's total, whoever appended to it, plus this row. A total the caller gave
        is kept."""
        wanted: dict[str, str] = {}
        for key, value in values.items():
            total = cumulative_key(key)
            if total is not None and value is not None and total not in values:
                wanted[total] = key
        if not wanted:
            return {}
        index = await self._history_index()
        return {total: index.total(key) + float(values[key]) for total, key in wanted.items()}

    async def history(self) -> Sequence[MetricsRow]:
        """Every row of this model's history, oldest first, less the train-split rows of
        updates that never trained (retired by a later marker, see training_row)."""
        return trained_rows(await self._history.rows(self.run))

    async def logged_groups(self, split: str, step: int) -> list[TrajectoryGroup]:
        """Every group logged at (split, step), in the order they were logged."""
        validate_name(split, "split")
        return await self._store.read(self.run, split, step)

    async def close(self) -> None:
        await self._close_client()
        for reporter in (self._history, *self._mirrors):
            await reporter.close()

    async def __aenter__(self) -> Model:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals shared with TrainableModel ---------------------------------------------

    async def _report(self, row: MetricsRow, *, mirror: bool = True) -> None:
        """The history first (authoritative), then the mirrors (unless `mirror` is false).
        The index learns of the row when it next catches up with the ledger, like any other
        writer's row."""
        self._record_config()
        await self._history.report(self.run, row)
        if mirror:
            await self._mirror(row)

    async def _mirror(self, row: MetricsRow) -> None:
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
        """The index, caught up with every row appended to the ledger by anyone (this model,
        an evaluator process, a restarted trainer) since its last look. Called before every
        policy decision; it reads only the new rows, so its cost does not grow with the
        history. A ledger cut short or replaced behind its back is read again from the start
        (the policies built on the old index are dropped with it)."""
        index = self._index
        if index is None:
            index = self._index = HistoryIndex()
        try:
            rows, cursor = await self._history.rows_since(self.run, index.cursor)
        except CorruptDataError:
            if index.cursor == 0:
                raise  # damaged in the middle: reading again would fail the same way
            logger.warning("the ledger of %s changed behind this model; reading it again", self.run)
            self._index, self._lr_policies, self._best_steps = None, {}, {}
            return await self._history_index()
        index.catch_up(rows, cursor)
        return index


def config_json(config: object) -> dict[str, Any]:
    """A model's config as the JSON the run records: a mapping, or a pydantic model dumped."""
    if isinstance(config, PydanticModel):
        return dict(config.model_dump(mode="json"))
    if isinstance(config, Mapping):
        return dict(config)
    raise InvalidInputError(
        f"config must be a mapping or a pydantic model, got {type(config).__name__}"
    )
