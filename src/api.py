"""The public `arthex.Model` and `arthex.TrainableModel`: the core classes with their default
ports taken from the composition root. An adapter passed explicitly wins over the default."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .container import container
from .core import model as core
from .ports.metrics_reporter import MetricsHistory, MetricsReporter
from .ports.run_lease import RunLeases
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
