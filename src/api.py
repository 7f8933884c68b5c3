"""The public `arthex.Model` and `arthex.TrainableModel`: the core classes with their default
ports taken from the composition root. An adapter passed explicitly wins over the default."""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Mapping, Sequence
from typing import Any

from .container import container
from .core import model as core
from .core import pipeline
from .ports.metrics_reporter import MetricsHistory, MetricsReporter
from .ports.pipeline_state import PipelineStateStore
from .ports.run_lease import RunLeases
from .ports.training_backend import TrainingBackend
from .ports.trajectory_store import TrajectoryStore


def _ports(
    base_path: str,
    report_metrics: Sequence[str] | None,
    store: TrajectoryStore | None,
    history: MetricsHistory | None,
    mirrors: Sequence[MetricsReporter] | None,
) -> tuple[TrajectoryStore, MetricsHistory, Sequence[MetricsReporter]]:
    return (
        store if store is not None else container.trajectory_store(base_path),
        history if history is not None else container.history(base_path),
        mirrors if mirrors is not None else container.mirrors(base_path, report_metrics),
    )


class Model(core.Model):
    """`Model(name=..., project=..., base_path=".art", report_metrics=None)`: logs evaluations
    under `{base_path}/{project}/models/{name}/`. `report_metrics=["wandb"]` mirrors rows to
    wandb; None mirrors when wandb credentials (or WANDB_MODE=offline) are present; [] never."""

    def __init__(
        self,
        *,
        name: str,
        project: str,
        base_path: str = ".art",
        report_metrics: Sequence[str] | None = None,
        config: Mapping[str, Any] | None = None,
        store: TrajectoryStore | None = None,
        history: MetricsHistory | None = None,
        mirrors: Sequence[MetricsReporter] | None = None,
    ) -> None:
        store, history, mirrors = _ports(base_path, report_metrics, store, history, mirrors)
        super().__init__(
            name=name,
            project=project,
            store=store,
            history=history,
            mirrors=mirrors,
            base_path=base_path,
            config=config,
        )


class TrainableModel(core.TrainableModel):
    """A model a backend trains: construct it, then `await model.register(backend)`."""

    def __init__(
        self,
        *,
        name: str,
        project: str,
        base_model: str,
        base_path: str = ".art",
        report_metrics: Sequence[str] | None = None,
        config: Mapping[str, Any] | None = None,
        store: TrajectoryStore | None = None,
        history: MetricsHistory | None = None,
        mirrors: Sequence[MetricsReporter] | None = None,
        leases: RunLeases | None = None,
    ) -> None:
        store, history, mirrors = _ports(base_path, report_metrics, store, history, mirrors)
        super().__init__(
            name=name,
            project=project,
            base_model=base_model,
            store=store,
            history=history,
            mirrors=mirrors,
            base_path=base_path,
            config=config,
            leases=leases if leases is not None else container.run_leases(base_path),
        )


class PipelineTrainer(pipeline.PipelineTrainer):
    """`PipelineTrainer(model, backend, rollout_fn, scenarios, config, eval_fn=None, ...)`:
    rollouts overlap training (see `arthex.core.pipeline.PipelineTrainer` for every option).
    Its record goes to `pipeline_state.json` in the model's run directory unless `state_store`
    is given."""

    def __init__(
        self,
        model: core.TrainableModel,
        backend: TrainingBackend,
        rollout_fn: pipeline.RolloutFn,
        scenarios: Iterable[Any] | AsyncIterable[Any],
        config: Any,
        eval_fn: pipeline.EvalFn | None = None,
        *,
        state_store: PipelineStateStore | None = None,
        **options: Any,
    ) -> None:
        super().__init__(
            model,
            backend,
            rollout_fn,
            scenarios,
            config,
            eval_fn,
            state_store=state_store
            if state_store is not None
            else container.pipeline_state(model.base_path),
            **options,
        )
