"""What the training server does, without HTTP: register, list and delete checkpoints, run
training jobs, and find the inference endpoint behind a served name.

It turns a tenant's `project/name` into the backend's `RunRef(tenant, model_id)`, registers
models with the backend lazily (after a restart, on first use), allows one job per model at a
time and one trainer per model (leases.py), checks the tenant's quotas (quotas.py) before
anything is written, and hands admitted jobs to the runner (runner.py), which records their
events durably. Errors are ArthexError subclasses; the HTTP layer maps them to statuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tarfile
import tempfile
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...adapters.layout import CHECKPOINTS, RunLayout, step_name
from ...adapters.serverless.errors import ModelBusyError
from ...adapters.serverless.wire import parse_artifact_name, parse_count
from ...core.backend_train import checked_train_steps
from ...core.errors import (
    InvalidInputError,
    NotRegisteredError,
    UnsupportedCapability,
)
from ...core.identity import ModelSpec, RunRef, validate_name
from ...ports.training_backend import InferenceEndpoint, RunForgetting, TrainingBackend
from .jobs import JobLog, JobStore
from .leases import Lease, LeaseTable, parse_claim
from .limits import ServerLimits
from .quotas import TenantQuotas
from .registry import ModelRecord, ModelRegistry
from .runner import JobRunner, experimental_config, parse_config, parse_groups

logger = logging.getLogger("arthex.serverless")

MAX_BASE_MODEL_LENGTH = 1024


class TrainingService:
    """One backend, one state directory: `registry.json`, `jobs/`, and `backend/` (the
    `base_path` the backend is given for every model, so its checkpoints live there)."""

    def __init__(
        self,
        backend: TrainingBackend,
        state_dir: str | Path,
        *,
        allowed_base_models: Collection[str] | None = None,
        limits: ServerLimits | None = None,
    ) -> None:
        self.backend = backend
        self.state_dir = Path(state_dir).resolve()
        self.allowed_base_models = (
            frozenset(allowed_base_models) if allowed_base_models is not None else None
        )
        self.limits = limits if limits is not None else ServerLimits()
        self.registry = ModelRegistry(self.state_dir / "registry.json")
        self.jobs = JobStore(self.state_dir / "jobs", retention_s=self.limits.job_retention_s)
        self.leases = LeaseTable(self.state_dir / "leases.json", self.limits.lease_ttl_s)
        self.quotas = TenantQuotas(self.limits, self.backend_root)
        self._endpoints: dict[str, InferenceEndpoint | None] = {}
        self._register_locks: dict[str, asyncio.Lock] = {}
        self.runner = JobRunner(
            backend,
            max_running_jobs=self.limits.max_running_jobs,
            scrub=self.scrub,
            on_end=lambda record: self.quotas.job_ended(record.tenant),
        )

    @property
    def backend_root(self) -> Path:
        return self.state_dir / "backend"

    @property
    def spool_dir(self) -> Path:
        """Where request bodies past the spool threshold wait (on the state's disk, not in a
        /tmp that may be memory)."""
        return self.state_dir / "tmp"

    def open(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.spool_dir.mkdir(exist_ok=True)
        self.runner.open()
        self.registry.load()
        self.leases.load()
        for job in self.jobs.load():
            logger.warning("job %s was interrupted by a server stop; marked failed", job.id)

    async def close(self) -> None:
        """Stop running jobs (each gets a training_failed event), then close the backend."""
        await self.runner.close()
        await self.backend.close()

    # --- models -------------------------------------------------------------------------

    def scrub(self, message: str) -> str:
        """Error text for a tenant: the server's own paths are not its business."""
        return message.replace(str(self.state_dir), "<server-state>")

    def capabilities(self) -> list[str]:
        return sorted(self.backend.capabilities.names)

    async def register(
        self,
        tenant: str,
        project: object,
        name: object,
        base_model: object,
        config: object,
        lease: object = None,
    ) -> tuple[ModelRecord, bool, Lease | None]:
        """The tenant's model `project/name` (created when new), and the trainer's lease when
        `lease` ({"id", "holder"}) asks for one. Returns (record, created, lease)."""
        project = validate_name(project, "project")
        name = validate_name(name, "name")
        base = self._check_base_model(base_model)
        claim = parse_claim(lease)
        if config is None:
            config = {}
        if not isinstance(config, Mapping):
            raise InvalidInputError(f"config must be a JSON object, got {type(config).__name__}")
        existing = self.registry.find(tenant, project, name)
        if existing is not None:
            if existing.base_model != base:
                raise InvalidInputError(
                    f"model {project}/{name} is registered with base_model "
                    f"{existing.base_model!r}, not {base!r}; register it under another name"
                )
            granted = self._claim(existing, claim)  # before the backend does anything
            await self.ensure_registered(existing)
            return existing, False, granted
        with self.quotas.registering(tenant, (project, name), len(self.registry.of_tenant(tenant))):
            await asyncio.to_thread(self.quotas.check_storage, tenant, 0)
            record = await self._create(tenant, project, name, base, dict(config))
        return record, True, self._claim(record, claim)

    def _claim(self, record: ModelRecord, claim: tuple[str, str] | None) -> Lease | None:
        if claim is None:
            return None
        return self.leases.claim(record.id, claim[0], claim[1], record.label)

    async def _create(
        self, tenant: str, project: str, name: str, base: str | None, config: dict[str, Any]
    ) -> ModelRecord:
        record = ModelRecord(
            id=self.registry.new_id(tenant, project, name),
            tenant=tenant,
            project=project,
            name=name,
            base_model=base,
            config=config,
        )
        created_before = self._existing_ancestors(record)
        try:
            await self.ensure_registered(record, creating=True)
        except BaseException as exc:
            self._remove_created(record, created_before)
            if isinstance(exc, Exception) and not isinstance(exc, UnsupportedCapability):
                raise self._unloadable(base, exc) from None
            raise
        self.registry.add(record)
        return record

    def _unloadable(self, base: str | None, exc: Exception) -> InvalidInputError:
        """One answer for every base model the backend could not load, whatever the reason.

        A missing path, a directory that is not a model and a hub id the server cannot reach
        get the same status and message, so a tenant cannot probe which paths exist on the
        server. The reason goes to the server's log, for the operator."""
        logger.warning("register: the backend could not load base_model %r: %r", base, exc)
        return InvalidInputError(
            f"base_model {base!r:.200} cannot be loaded by this server's backend "
            f"({type(self.backend).__name__}); name a model the server offers (ask its "
            "operator which hub ids or model directories)"
        )

    def model(self, tenant: str, model_id: str) -> ModelRecord:
        record = self.registry.get(tenant, model_id)
        if record is None:
            raise NotRegisteredError(
                f"no model {model_id!r} is registered for this API key; register it first "
                "(POST /preview/models)"
            )
        return record

    async def ensure_registered(
        self, record: ModelRecord, *, creating: bool = False
    ) -> InferenceEndpoint | None:
        """Register with the backend once per server process (again after a restart).
        NotRegisteredError when the model was deleted meanwhile (unless it is being created):
        a request that found it before the delete never opens its run again."""
        if record.id in self._endpoints:
            return self._endpoints[record.id]
        async with self._lock_of(record):
            return await self._registered(record, creating=creating)

    @contextlib.asynccontextmanager
    async def holding(self, record: ModelRecord) -> AsyncIterator[InferenceEndpoint | None]:
        """The model registered with the backend, kept from being deleted while the block
        runs (a write into its folder must not outlive the delete that removes it)."""
        async with self._lock_of(record):
            yield await self._registered(record)

    def _lock_of(self, record: ModelRecord) -> asyncio.Lock:
        """The model id's lock: registering and deleting it take turns. Kept after a delete
        (ids come back for the same names), so a request waiting on it and one that comes
        later never hold two different locks of one id."""
        return self._register_locks.setdefault(record.id, asyncio.Lock())

    async def _registered(
        self, record: ModelRecord, *, creating: bool = False
    ) -> InferenceEndpoint | None:
        """`ensure_registered`, its lock held."""
        if not creating and self.registry.get(record.tenant, record.id) is None:
            raise NotRegisteredError(f"model {record.label} was deleted")
        if record.id not in self._endpoints:
            spec = ModelSpec(
                run=record.run,
                base_model=record.base_model,
                trainable=True,
                base_path=str(self.backend_root),
                config=record.config,
            )
            self._endpoints[record.id] = await self.backend.register(spec)
        return self._endpoints[record.id]

    def _check_base_model(self, value: object) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value or len(value) > MAX_BASE_MODEL_LENGTH:
            raise InvalidInputError(
                f"base_model must be a non-empty string of at most {MAX_BASE_MODEL_LENGTH} "
                f"characters, got {value!r:.80}"
            )
        if any(ord(c) < 32 for c in value):
            raise InvalidInputError(f"base_model {value!r:.80} holds control characters")
        if self.allowed_base_models is not None and value not in self.allowed_base_models:
            raise InvalidInputError(
                f"base_model {value!r:.80} is not offered by this server; offered: "
                f"{sorted(self.allowed_base_models)}"
            )
        return value

    async def forget(self, record: ModelRecord, folder: Path) -> None:
        """Drop a model whose registry entry is gone: the backend forgets its run (a backend
        that holds runs open in memory, RunForgetting), then its `folder` is removed. Under the
        id's lock, so neither a request that found the model before the delete nor the same
        names registered again can open the run in between: the first gets NotRegisteredError,
        the second waits and then opens a fresh model at step 0."""
        async with self._lock_of(record):
            self._endpoints.pop(record.id, None)
            if isinstance(self.backend, RunForgetting):
                await self.backend.forget_run(record.run)
            await asyncio.to_thread(shutil.rmtree, folder, True)

    def _model_dir(self, record: ModelRecord) -> list[Path]:
        """The folders a file-based backend makes for a model, outermost first."""
        run_dir = RunLayout.of(self.backend_root, RunRef(record.tenant, record.id)).dir
        return [self.backend_root, run_dir.parents[1], run_dir.parent, run_dir]

    def _existing_ancestors(self, record: ModelRecord) -> set[Path]:
        return {path for path in self._model_dir(record) if path.exists()}

    def _remove_created(self, record: ModelRecord, existed: set[Path]) -> None:
        """A failed register leaves nothing behind: remove what it created, innermost first."""
        self._endpoints.pop(record.id, None)
        for path in reversed(self._model_dir(record)):
            if path in existed or not path.exists():
                continue
            if path.name == record.id:
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    path.rmdir()  # only when empty

    # --- checkpoints --------------------------------------------------------------------

    async def checkpoints(self, record: ModelRecord) -> tuple[list[int], int]:
        await self.ensure_registered(record)
        steps = await self.backend.checkpoint_steps(record.run)
        return sorted(steps), await self.backend.get_step(record.run)

    async def checkpoint_archive(self, record: ModelRecord, step: int) -> Path:
        """A tar of the checkpoint folder of `step` (its files as the backend wrote them), in the
        spool directory; the caller deletes it. For a backend that keeps checkpoints in this
        state directory (LocalBackend); others have no files here to give."""
        await self.ensure_registered(record)
        if step not in await self.backend.checkpoint_steps(record.run):
            raise NotRegisteredError(f"model {record.label} has no checkpoint at step {step}")
        folder = checkpoint_folder(self.backend_root, record, step)
        if not folder.is_dir():
            raise UnsupportedCapability(
                "export",
                type(self.backend).__name__,
                "this server's backend keeps no checkpoint files to send",
            )
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        return await asyncio.to_thread(_tar, folder, self.spool_dir)

    async def delete_checkpoints(
        self, record: ModelRecord, steps: Sequence[int], lease: str | None = None
    ) -> dict[str, Any]:
        """Delete the given steps, except the latest (and any the backend protects)."""
        self.leases.require(record.id, lease, record.label)
        self.refuse_if_training(record)
        await self.ensure_registered(record)
        existing = await self.backend.checkpoint_steps(record.run)
        doomed = set(steps)
        keep = [step for step in existing if step not in doomed]
        deleted = sorted(await self.backend.delete_checkpoint_files(record.run, keep))
        after = sorted(await self.backend.checkpoint_steps(record.run))
        return {
            "deleted": deleted,
            "deleted_count": len(deleted),
            "not_found_steps": sorted(doomed - set(existing)),
            "kept_steps": sorted((doomed & set(existing)) - set(deleted)),
            "steps": after,
        }

    # --- training -----------------------------------------------------------------------

    async def start_job(
        self,
        tenant: str,
        model_id_value: object,
        groups_json: object,
        config_json: object,
        lease: str | None = None,
        experimental: object = None,
    ) -> JobLog:
        """Check everything, then start the job; nothing is written when a check fails. The
        config comes as the hosted API's `experimental_config` (ART's option names), or as
        arthex's older `config` (TrainConfig's fields)."""
        if not isinstance(model_id_value, str):
            raise InvalidInputError("model_id must be the id returned by POST /preview/models")
        record = self.model(tenant, model_id_value)
        if experimental is not None:
            config = experimental_config(experimental)
        else:
            config = parse_config(config_json)
        groups = parse_groups(groups_json)
        # the core's checks, before the job starts (they raise here, nothing written)
        updates = checked_train_steps(self.backend, record.run, groups, config)
        trajectories = sum(len(g.trajectories) for g in groups)
        started = {
            "num_groups": len(groups),
            "num_trajectories": trajectories,
            "num_sequences": trajectories,
        }
        return await self.launch(
            tenant,
            record,
            started,
            lambda: updates,
            lease,
        )

    async def launch(
        self,
        tenant: str,
        record: ModelRecord,
        started: Mapping[str, Any],
        updates: Callable[[], AsyncIterator[Mapping[str, float]]],
        lease: str | None = None,
    ) -> JobLog:
        """Claim the model for a job (its lease, one job per model, the tenant's quotas),
        then run `updates()` as the job: `training_started` (with `started`), one
        `gradient_step` per update, and the end. RL and SFT jobs both start here."""
        self.leases.require(record.id, lease, record.label)
        self.refuse_if_training(record)
        self.quotas.admit_job(tenant)
        await self.ensure_registered(record)
        steps = await self.backend.checkpoint_steps(record.run)
        await self.quotas.admit_checkpoint(tenant, self._model_dir(record)[-1], len(steps))
        # Those awaited: check again, then claim, with no await in between.
        if self.registry.get(tenant, record.id) is None:  # deleted meanwhile
            raise NotRegisteredError(f"model {record.label} was deleted")
        self.leases.require(record.id, lease, record.label)
        self.refuse_if_training(record)
        self.quotas.admit_job(tenant)
        job = self.jobs.create(tenant, record.id)
        self.quotas.job_started(tenant)
        self.runner.start(job, record, started, updates)
        return job

    def refuse_if_training(self, record: ModelRecord) -> None:
        running = self.runner.training.get(record.id)
        if running is not None:
            raise ModelBusyError(
                f"model {record.project}/{record.name} is training (job {running}); one job "
                "per model runs at a time: wait for it to end, then retry"
            )

    # --- inference ----------------------------------------------------------------------

    async def resolve_served(
        self, tenant: str, requested: object, project: str | None
    ) -> tuple[ModelRecord, InferenceEndpoint, str]:
        """`[project/]name[@step]`, or the service's `wandb-artifact:///{entity}/{project}/
        {name}[:step{N}]` (the entity is the key's tenant) -> (record, the backend's endpoint,
        the backend's name)."""
        if not isinstance(requested, str) or not requested:
            raise InvalidInputError("'model' must be a served name such as 'my-model@3'")
        artifact = parse_artifact_name(requested)
        if artifact is not None:
            return await self._resolve_artifact(tenant, requested, artifact, project)
        base, at, step = requested.partition("@")
        if at and parse_count(step) is None:
            raise InvalidInputError(f"model {requested!r}: the step after '@' must be a number")
        if "/" in base:
            project_part, _, base = base.partition("/")
            if project is not None and project_part != project:
                raise NotRegisteredError(f"model {requested!r} is not in project {project!r}")
            project = project_part
        matches = self.registry.named(tenant, base, project)
        if not matches:
            raise NotRegisteredError(f"model {requested!r} is not registered for this API key")
        if len(matches) > 1:
            projects = sorted(r.project for r in matches)
            raise InvalidInputError(
                f"model name {base!r} is registered in projects {projects}; ask for "
                f"'project/{requested}' or use the base URL /v1/projects/<project>"
            )
        record = matches[0]
        endpoint = await self.ensure_registered(record)
        if endpoint is None:
            raise NotRegisteredError(
                f"this server's backend ({type(self.backend).__name__}) serves no inference"
            )
        served = record.run.inference_name(int(step)) if at else record.run.name
        return record, endpoint, served

    async def _resolve_artifact(
        self,
        tenant: str,
        requested: str,
        artifact: tuple[str, str, str, int | None],
        project: str | None,
    ) -> tuple[ModelRecord, InferenceEndpoint, str]:
        entity, in_project, name, step = artifact
        record = self.registry.find(tenant, in_project, name) if entity == tenant else None
        if record is None or (project is not None and in_project != project):
            raise NotRegisteredError(f"model {requested!r} is not registered for this API key")
        endpoint = await self.ensure_registered(record)
        if endpoint is None:
            raise NotRegisteredError(
                f"this server's backend ({type(self.backend).__name__}) serves no inference"
            )
        return record, endpoint, record.run.inference_name(step)

    def served_records(self, tenant: str, project: str | None) -> list[ModelRecord]:
        """The tenant's models that are registered with the backend in this process."""
        return [
            r
            for r in self.registry.of_tenant(tenant)
            if self._endpoints.get(r.id) is not None and (project is None or r.project == project)
        ]

    def endpoint_of(self, record: ModelRecord) -> InferenceEndpoint | None:
        return self._endpoints.get(record.id)


def checkpoint_folder(backend_root: Path, record: ModelRecord, step: int) -> Path:
    """Where the server's LocalBackend keeps step `step` of `record`."""
    return RunLayout.of(backend_root, record.run).dir / CHECKPOINTS / step_name(step)


def _tar(folder: Path, spool: Path) -> Path:
    """The files of `folder` (no folders, no links), as an uncompressed tar in `spool`."""
    handle, name = tempfile.mkstemp(prefix="checkpoint-", suffix=".tar", dir=spool)
    os.close(handle)
    path = Path(name)
    try:
        with tarfile.open(path, "w") as archive:
            for item in sorted(folder.iterdir()):
                if item.is_file() and not item.is_symlink():
                    archive.add(item, arcname=item.name, recursive=False)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path
