"""The public `arthex.Model` and `arthex.TrainableModel`: the core classes with their default
ports taken from the composition root. An adapter passed explicitly wins over the default.

The constructors take ART 0.5.23's keyword arguments too, so an ART script's model
construction runs unchanged; where arthex does a thing elsewhere it says so in a warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel as PydanticModel

from ..accounting.model_methods import ArtModelMethods, ArtTrainableMethods
from ..core import model as core
from ..core import trainable
from ..core.errors import InvalidInputError
from ..core.metrics import MetricsRow
from ..ports.metrics_reporter import MetricsHistory, MetricsReporter
from ..ports.training_backend import RunLeases
from ..ports.trajectory_store import PipelineStateStore, RunStateStore, TrajectoryStore
from .container import container

if TYPE_CHECKING:
    from openai import AsyncOpenAI


def model_ports(
    base_path: str = ".art",
    report_metrics: Sequence[str] | None = None,
    entity: str | None = None,
    *,
    store: TrajectoryStore | None = None,
    reporter: MetricsHistory | None = None,
    mirrors: Sequence[MetricsReporter] | None = None,
    state: RunStateStore | None = None,
    leases: RunLeases | None = None,
    pipeline_state: PipelineStateStore | None = None,
) -> core.ModelPorts:
    """A model's ports, built once: each adapter given wins, the rest are the defaults under
    `base_path` (parquet trajectories, the `history.jsonl` ledger, `state.json`, the trainer
    lease file, `pipeline_state.json`, the `diagnostics/` reports) and the mirrors
    `report_metrics` names."""
    return core.ModelPorts(
        store=store if store is not None else container.trajectory_store(base_path),
        reporter=reporter if reporter is not None else container.history(base_path),
        mirrors=(
            mirrors if mirrors is not None else container.mirrors(base_path, report_metrics, entity)
        ),
        state=state if state is not None else container.run_state(base_path),
        leases=leases if leases is not None else container.run_leases(base_path),
        pipeline_state=(
            pipeline_state if pipeline_state is not None else container.pipeline_state(base_path)
        ),
        reports=container.diagnostics_files(base_path),
    )


def _ports_of(
    ports: core.ModelPorts | None,
    base_path: str,
    report_metrics: Sequence[str] | None,
    entity: str | None,
    store: TrajectoryStore | None,
    reporter: MetricsHistory | None,
    mirrors: Sequence[MetricsReporter] | None,
    state: RunStateStore | None,
    leases: RunLeases | None = None,
) -> core.ModelPorts:
    """The model's ports: given whole (`ports=`), or built by `model_ports` from the adapters
    given one by one and the defaults; never both (one would be ignored)."""
    if ports is None:
        return model_ports(
            base_path,
            report_metrics,
            entity,
            store=store,
            reporter=reporter,
            mirrors=mirrors,
            state=state,
            leases=leases,
        )
    if any(adapter is not None for adapter in (store, reporter, mirrors, state, leases)):
        raise InvalidInputError(
            "pass the adapters either in ports= or one by one (store=, reporter=, mirrors=, "
            "state=, leases=), not both"
        )
    return ports


def _warn_backend_settings(lora_config: object, internal_config: object) -> None:
    """ART configures LoRA and the inference engine on the model; arthex on the backend."""
    if lora_config is not None:
        warnings.warn(
            "lora_config is ignored: arthex sets LoRA on the backend, e.g. "
            "LocalBackend(lora_rank=8, lora_alpha=16, lora_target_modules=[...])",
            UserWarning,
            stacklevel=3,
        )
    if internal_config is not None:
        warnings.warn(
            "_internal_config is ignored: arthex sets engine and trainer options on the "
            "backend, e.g. LocalBackend(engine='vllm', device='cuda', full_finetune=False)",
            UserWarning,
            stacklevel=3,
        )


class Model(ArtModelMethods, core.Model):
    """`Model(name=..., project=..., base_path=".art", report_metrics=None)`: logs evaluations
    under `{base_path}/{project}/models/{name}/`. `report_metrics=["wandb"]` mirrors rows to
    wandb (under `entity`, when given); None mirrors when wandb credentials (or
    WANDB_MODE=offline) are present; [] never. `inference_base_url`, `inference_api_key` and
    `inference_model_name` point `openai_client()` at any OpenAI-compatible service, to
    evaluate a prompted model the same way as a trained one. `run_name` stores the run under
    another name than `name` (see TrainableModel)."""

    def __init__(
        self,
        *,
        name: str,
        project: str,
        entity: str | None = None,
        config: Mapping[str, Any] | PydanticModel | None = None,
        inference_api_key: str | None = None,
        inference_base_url: str | None = None,
        inference_model_name: str | None = None,
        base_path: str = ".art",
        report_metrics: Sequence[str] | None = None,
        store: TrajectoryStore | None = None,
        reporter: MetricsHistory | None = None,
        mirrors: Sequence[MetricsReporter] | None = None,
        state: RunStateStore | None = None,
        run_name: str | None = None,
        ports: core.ModelPorts | None = None,
    ) -> None:
        ports = _ports_of(ports, base_path, report_metrics, entity, store, reporter, mirrors, state)
        super().__init__(
            name=name,
            project=project,
            ports=ports,
            base_path=base_path,
            config=config,
            run_name=run_name,
            inference_base_url=inference_base_url,
            inference_api_key=inference_api_key,
            inference_model_name=inference_model_name,
        )
        self.entity = entity

    async def log(
        self,
        trajectories: core.LogInput | None = None,
        split: str = "val",
        *,
        metrics: Mapping[str, float | int | bool | None] | None = None,
        step: int | None = None,
    ) -> MetricsRow | None:
        """Write the groups under (split, step) and one history row of their metrics (and of
        the split's step metrics builder: costs with their roll-ups; see ArtModelMethods)."""
        routed = await self._art_step_metrics(split, metrics)
        return await super().log(
            trajectories, split, metrics=metrics if routed is None else routed, step=step
        )


class TrainableModel(ArtTrainableMethods, trainable.TrainableModel, Model):
    """A model a backend trains: construct it, then `await model.register(backend)`. It is an
    `arthex.Model` too, as in ART (the core's `__init__` reaches `Model.__init__` with the
    ports already built, so nothing is built twice).

    `run_name` (required by ART 0.5.23, optional here) names the run: its directory
    `{base_path}/{project}/models/{run_name}/`, its history and wandb run. `name` is what
    inference calls it, as in ART 0.5.23: served as `{name}@{step}` (what
    `get_inference_name()` returns; ServerlessBackend names steps the hosted service's way).
    Without `run_name` the run is called `name`, as before ART 0.5.23.
    """

    def __init__(
        self,
        *,
        name: str,
        project: str,
        base_model: str,
        run_name: str | None = None,
        entity: str | None = None,
        config: Mapping[str, Any] | PydanticModel | None = None,
        base_path: str = ".art",
        report_metrics: Sequence[str] | None = None,
        lora_config: object = None,
        _internal_config: object = None,
        store: TrajectoryStore | None = None,
        reporter: MetricsHistory | None = None,
        mirrors: Sequence[MetricsReporter] | None = None,
        state: RunStateStore | None = None,
        leases: RunLeases | None = None,
        ports: core.ModelPorts | None = None,
    ) -> None:
        _warn_backend_settings(lora_config, _internal_config)
        ports = _ports_of(
            ports, base_path, report_metrics, entity, store, reporter, mirrors, state, leases
        )
        super().__init__(
            name=name,
            project=project,
            base_model=base_model,
            ports=ports,
            base_path=base_path,
            config=config,
            run_name=run_name,
        )
        self.entity = entity

    def openai_client(self) -> AsyncOpenAI:
        """An `openai.AsyncOpenAI` for the backend's endpoint (cached per registration and event
        loop); a cost calculator set on the model prices its chat completions."""
        return self._art_wrap_client(super().openai_client())
