"""The composition root: the only module that names concrete adapters.

Factories import their adapter inside their body, so building the container imports nothing
heavy; tests override providers (`container.trajectory_store.override(...)`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any, cast

from dependency_injector import containers, providers

from ..core.errors import InvalidInputError
from ..core.identity import RunRef
from ..ports.metrics_reporter import MetricsHistory, MetricsReporter
from ..ports.training_backend import RunLeases, TrainingBackend
from ..ports.trajectory_store import PipelineStateStore, RunStateStore, TrajectoryStore

MIRRORS = ("wandb",)


def parquet_store(base_path: str) -> TrajectoryStore:
    from ..adapters.parquet.store import ParquetTrajectoryStore

    return ParquetTrajectoryStore(base_path)


def _local_root(base_path: str, what: str) -> None:
    if "://" in str(base_path):
        raise InvalidInputError(
            f"base_path {base_path!r} is a URI, but {what} needs a local file system "
            "(file locks): keep base_path local and pass "
            f"store=ParquetTrajectoryStore({str(base_path)!r}) for the trajectories"
        )


def jsonl_history(base_path: str) -> MetricsHistory:
    """The ledger; its root must be a local folder this process can write (checked now, when
    the model is built, so a read-only base_path is one clear error and not a failed write)."""
    _local_root(base_path, "history.jsonl")
    from pathlib import Path

    from ..adapters.files import check_writable_directory
    from ..adapters.jsonl_history import JsonlHistory

    check_writable_directory(Path(base_path))
    return JsonlHistory(base_path)


def json_pipeline_state(base_path: str) -> PipelineStateStore:
    from ..adapters.run_files.pipeline import JsonPipelineStateStore

    return JsonPipelineStateStore(base_path)


def file_run_leases(base_path: str) -> RunLeases:
    """Trainer leases beside the ledger (one `trainer.lease` per run directory)."""
    _local_root(base_path, "the run lease")
    from ..adapters.run_files.lease import FileRunLeases

    return FileRunLeases(base_path)


def json_run_state(base_path: str) -> RunStateStore | None:
    """`state.json` beside the history; none for a URI base path (it needs file locks)."""
    if "://" in str(base_path):
        return None
    from ..adapters.run_files.state import JsonRunState

    return JsonRunState(base_path)


def diagnostics_files(base_path: str) -> Callable[[RunRef, str, str], str] | None:
    """The writer of a run's diagnostics reports (`{run}/diagnostics/`); none for a URI base
    path (the watchdog then writes its reports to the temp folder and says where)."""
    if "://" in str(base_path):
        return None
    from ..adapters.run_files.diagnostics import DiagnosticsFiles

    return DiagnosticsFiles(base_path)


def wandb_wanted(report_metrics: Sequence[str] | None) -> bool:
    """`report_metrics` names wandb; or it is None and wandb has credentials or a local mode."""
    if report_metrics is not None:
        return "wandb" in report_metrics
    if os.environ.get("WANDB_MODE", "").strip().lower() in ("offline", "dryrun", "disabled"):
        return True
    from ..adapters.wandb_reporter import has_credentials  # stdlib only; the SDK stays unloaded

    return has_credentials()


def mirrors(
    base_path: str, report_metrics: Sequence[str] | None, entity: str | None = None
) -> list[MetricsReporter]:
    if isinstance(report_metrics, str):
        report_metrics = [report_metrics]
    unknown = sorted(set(report_metrics or ()) - set(MIRRORS))
    if unknown:
        raise InvalidInputError(
            f"report_metrics names unknown reporters {unknown}; known: {list(MIRRORS)}"
        )
    chosen: list[MetricsReporter] = []
    if wandb_wanted(report_metrics):
        from ..adapters.wandb_reporter import WandbReporter

        reporter = WandbReporter(base_path, entity=entity)
        reporter.check_ready()  # fail fast, before any training work
        chosen.append(reporter)
    return chosen


BACKENDS = "arthex.backends"


def backend(kind: str, **kwargs: Any) -> TrainingBackend:
    """A backend by name from the one table of them, the `arthex.backends` entry points
    (pyproject.toml lists the built-ins there, `local`, `serverless`, `tinker` and the kit's
    `inmemory`; a third party adds its own), or `module:callable`, a factory of your own. Each
    adapter imports its heavy libraries when built, naming the extra to install."""
    if ":" in kind:
        entry = EntryPoint(name=kind, value=kind, group=BACKENDS)
    else:
        found = [entry for entry in entry_points(group=BACKENDS) if entry.name == kind]
        if not found:
            known = ", ".join(sorted({entry.name for entry in entry_points(group=BACKENDS)}))
            raise InvalidInputError(
                f"unknown backend kind {kind!r}; known: {known}, or module:callable (a factory)"
            )
        entry = found[0]
    try:
        factory = entry.load()
    except (ImportError, AttributeError) as exc:
        raise InvalidInputError(f"cannot load backend {kind!r} ({entry.value}): {exc}") from exc
    return cast(TrainingBackend, factory(**kwargs))


class Container(containers.DeclarativeContainer):
    trajectory_store = providers.Factory(parquet_store)
    history = providers.Factory(jsonl_history)
    run_leases = providers.Factory(file_run_leases)
    run_state = providers.Factory(json_run_state)
    mirrors = providers.Factory(mirrors)
    backend = providers.Factory(backend)
    pipeline_state = providers.Factory(json_pipeline_state)
    diagnostics_files = providers.Factory(diagnostics_files)


container = Container()
