"""The Tinker server's training runs: creating and loading them, their training requests,
saving their state, and the REST view of their checkpoints.

A run lives as long as the server that created it; its record (`run.json`, with the tenant
that created it) and checkpoints stay on disk, so a restarted server still lists, serves and
resumes from them, but trains a recorded run only through a new run loaded from one of its
saved states. A run is its tenant's: to any other tenant it answers 404, as a missing one.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from .base_model import LoraSettings
from .batched import Request, batch_key, forward_backward_many
from .compute import TrainingRun
from .errors import HttpError, UserError, checkpoint_name
from .futures import Batchable, Futures, RequestOrder, Work
from .quota import TinkerQuotas
from .served import ServedModels
from .sessions import Sessions
from .store import RunStore, checkpoint_meta, iso, run_metadata
from .wire import (
    Reply,
    adam_settings,
    check_adam_config,
    decode_forward_backward,
    encode_forward_backward,
)


@attrs.define(eq=False)
class Run:
    run_id: str
    base_model: str
    lora: LoraSettings
    session_id: str | None  # None: recorded on disk by an earlier server, not live here
    tenant: str
    built: TrainingRun | None = None  # made by the run's first request, on the compute thread
    order: RequestOrder = attrs.Factory(RequestOrder)

    @property
    def trainer(self) -> TrainingRun:
        if self.built is None:
            raise UserError(f"training run {self.run_id} was not created successfully")
        return self.built


@attrs.define
class TrainingRuns:
    """The training runs of one server (live ones, and recorded ones looked up on demand)."""

    _models: ServedModels
    _store: RunStore
    _futures: Futures
    _sessions: Sessions
    _quotas: TinkerQuotas | None = attrs.field(default=None, kw_only=True)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    _runs: dict[str, Run] = attrs.field(factory=dict, init=False)

    @property
    def store(self) -> RunStore:
        return self._store

    # --- finding runs -------------------------------------------------------------------

    def check_base(self, base_model: object) -> str:
        """The served name of the base model a request names, or a 400 naming those served."""
        return self._models.resolve(base_model).name

    def get(self, run_id: str, tenant: str) -> Run:
        """The tenant's run of this server's lifetime, or one recorded in `state_dir` (not
        live); a 404 for a missing run and for another tenant's alike."""
        with self._lock:
            run = self._runs.get(run_id)
        if run is None:
            record = self._store.run_record(run_id)
            try:
                lora = LoraSettings.from_json(record["lora"]) if record is not None else None
            except (KeyError, TypeError, ValueError):
                lora = None
            if record is not None and lora is not None:
                recorded = Run(
                    run_id=run_id,
                    base_model=str(record.get("base_model")),
                    lora=lora,
                    session_id=None,
                    tenant=str(record["tenant"]),
                )
                with self._lock:
                    run = self._runs.setdefault(run_id, recorded)
        if run is None or run.tenant != tenant:
            raise HttpError(404, f"unknown training run {run_id!r}")
        return run

    def live(self, model_id: object, tenant: str) -> Run:
        run = self.get(str(model_id), tenant)
        if run.session_id is None:
            raise HttpError(
                400,
                f"training run {model_id} is not live in this server (it was restarted); "
                "create a training client from one of its saved states",
            )
        return run

    def _admit(self, run: Run) -> None:
        """Add a new run, within the tenant's quota of open runs."""
        if self._quotas is None:
            with self._lock:
                self._add(run)
            return
        with self._lock:
            open_runs = sum(
                1
                for other in self._runs.values()
                if other.tenant == run.tenant and self._sessions.is_live(other.session_id)
            )
            with self._quotas.registering(run.tenant, (run.run_id, ""), open_runs):
                self._add(run)

    def _add(self, run: Run) -> None:
        if run.run_id in self._runs:
            raise HttpError(400, f"model {run.run_id} already exists")
        self._runs[run.run_id] = run

    def admit_save(self, run: Run) -> None:
        if self._quotas is not None:
            self._quotas.admit_save(run.tenant, run.run_id)

    def queue(self, run: Run, seq_id: object, work: Work, batch: Batchable | None = None) -> Reply:
        """Queue `work` as request `seq_id` of `run`; the reply that names its promise."""
        request_id = self._futures.ordered(
            run.order, seq_id, work, model_id=run.run_id, batch=batch
        )
        return Reply.json({"request_id": request_id, "model_id": run.run_id})

    # --- creating and loading -----------------------------------------------------------

    def create_model(self, body: dict[str, Any], tenant: str) -> Reply:
        session_id = self._sessions.require(body, tenant)
        base_model = self.check_base(body.get("base_model"))
        lora = body.get("lora_config")
        if not isinstance(lora, dict):
            raise HttpError(400, "this server trains LoRA only; pass a lora_config")
        check_adam_config(body.get("optimizer_config"))
        metadata = run_metadata(body)
        settings = LoraSettings.from_json(lora)
        run = Run(
            run_id=str(uuid.uuid4()),
            base_model=base_model,
            lora=settings,
            session_id=session_id,
            tenant=tenant,
        )
        self._admit(run)
        self._store.write_run(
            run.run_id, run.base_model, run.lora, run.session_id, metadata, tenant=tenant
        )
        base = self._models.base(base_model)

        def work() -> Reply:
            run.built = TrainingRun(base, settings)
            return Reply.json({"type": "create_model", "model_id": run.run_id})

        request_id = self._futures.submit(work)
        return Reply.json({"request_id": request_id, "model_id": run.run_id})

    def load_weights(self, body: dict[str, Any], tenant: str) -> Reply:
        path = str(body.get("path"))
        source_id, directory, segment = self.existing(path, tenant)
        with_optimizer = bool(body.get("optimizer"))
        if with_optimizer and segment != "weights":
            raise HttpError(
                400,
                f"{path} holds sampler weights; load optimizer state from a "
                "save_state checkpoint (tinker://<run>/weights/<name>)",
            )
        source = self.get(source_id, tenant)
        if body.get("session_id") is not None:  # create-via-load: a new training run
            session_id = self._sessions.require(body, tenant)
            metadata = run_metadata(body)
            if body.get("base_model") is not None:
                self.check_base(body.get("base_model"))
            run = Run(
                run_id=f"{session_id}:train:{body.get('model_seq_id')}",
                base_model=source.base_model,
                lora=source.lora,
                session_id=session_id,
                tenant=tenant,
            )
            base = self._models.base(run.base_model)
            self._admit(run)
            self._store.write_run(
                run.run_id, run.base_model, run.lora, run.session_id, metadata, tenant=tenant
            )

            def create() -> Reply:
                run.built = TrainingRun(base, run.lora)
                run.trainer.load(directory, with_optimizer=with_optimizer)
                return Reply.json({"type": "load_weights", "path": path, "model_id": run.run_id})

            request_id = self._futures.submit(create)
            return Reply.json({"request_id": request_id, "model_id": run.run_id})
        run = self.live(body.get("model_id"), tenant)

        def load() -> Reply:
            if run.lora != source.lora:
                raise UserError(f"{path} has LoRA settings {source.lora}, model has {run.lora}")
            run.trainer.load(directory, with_optimizer=with_optimizer)
            return Reply.json({"type": "load_weights", "path": path, "model_id": run.run_id})

        return self.queue(run, body.get("seq_id"), load)

    def get_info(self, body: dict[str, Any], tenant: str) -> Reply:
        run = self.get(str(body.get("model_id")), tenant)
        return Reply.json(
            {
                "type": "get_info",
                "model_id": run.run_id,
                "model_data": {"arch": "causal_lm", "model_name": run.base_model},
                "is_lora": True,
                "lora_rank": run.lora.rank,
                "model_name": run.base_model,
            }
        )

    # --- training -----------------------------------------------------------------------

    def forward_backward(self, body: bytes, headers: Mapping[str, str], tenant: str) -> Reply:
        request = decode_forward_backward(body, headers)
        run = self.live(request.model_id, tenant)

        def work() -> Reply:
            outputs, loss_sum = run.trainer.forward_backward(
                request.data, request.loss_fn, request.config, forward_only=request.forward_only
            )
            return encode_forward_backward([o.numpy() for o in outputs], loss_sum)

        # Requests of other runs on this base waiting at the same time share one pass.
        base = self._models.base(run.base_model)
        batch = None
        if request.data:
            key = batch_key(base, run.lora, request.forward_only)
            batch = Batchable(key, (run, request), _forward_backward_many)
        return self.queue(run, request.seq_id, work, batch)

    def optim_step(self, body: dict[str, Any], tenant: str) -> Reply:
        run = self.live(body.get("model_id"), tenant)
        adam = adam_settings(body)

        def work() -> Reply:
            return Reply.json({"metrics": run.trainer.optim_step(adam)})

        return self.queue(run, body.get("seq_id"), work)

    def save_weights(self, body: dict[str, Any], tenant: str) -> Reply:
        run = self.live(body.get("model_id"), tenant)
        name = checkpoint_name(body.get("path"))
        self.admit_save(run)
        directory = self._store.checkpoint_dir(run.run_id, "weights", name)
        overwrite = bool(body.get("overwrite"))
        path = f"tinker://{run.run_id}/weights/{name}"

        def work() -> Reply:
            if directory.exists() and not overwrite:
                raise UserError(f"checkpoint {path} exists; pass overwrite=True to replace it")
            meta = checkpoint_meta(run.base_model, body)
            run.trainer.save(directory, meta=meta, with_optimizer=True)
            return Reply.json({"type": "save_weights", "path": path})

        return self.queue(run, body.get("seq_id"), work)

    # --- checkpoints (REST) -------------------------------------------------------------

    def existing(self, path: str, tenant: str) -> tuple[str, Path, str]:
        """(run id, folder, segment) of the tenant's saved checkpoint at `path`, or a 404
        (the same for another tenant's)."""
        run_id, _segment, _name = self._store.parse(path)
        try:
            self.get(run_id, tenant)
        except HttpError:
            raise HttpError(404, f"checkpoint {path} does not exist") from None
        return self._store.existing(path)

    def list_checkpoints(self, run_id: str, tenant: str) -> Reply:
        self.get(run_id, tenant)
        return Reply.json({"checkpoints": self._store.checkpoints(run_id), "cursor": None})

    def list_user_checkpoints(self, query: Mapping[str, str], tenant: str) -> Reply:
        """Every checkpoint of the tenant's runs, newest first, a page of them."""
        found = [c for r in self._owned(tenant) for c in self._store.checkpoints(r.run_id)]
        found.sort(key=lambda c: (c["time"], c["checkpoint_id"]), reverse=True)
        offset, limit = _page(query, 100)
        cursor = {"offset": offset, "limit": limit, "total_count": len(found)}
        return Reply.json({"checkpoints": found[offset : offset + limit], "cursor": cursor})

    def list_training_runs(self, query: Mapping[str, str], tenant: str) -> Reply:
        """The tenant's training runs, newest first, a page of them."""
        runs = list(reversed(self._owned(tenant)))
        offset, limit = _page(query, 20)
        cursor = {"offset": offset, "limit": limit, "total_count": len(runs)}
        page = [self._training_run(run) for run in runs[offset : offset + limit]]
        return Reply.json({"training_runs": page, "cursor": cursor})

    def get_training_run(self, run_id: str, tenant: str) -> Reply:
        return Reply.json(self._training_run(self.get(run_id, tenant)))

    def set_checkpoint_ttl(
        self, run_id: str, segment: str, name: str, body: Any, tenant: str
    ) -> Reply:
        self.get(run_id, tenant)
        self._store.set_ttl(run_id, segment, name, body.get("ttl_seconds"))
        return Reply.json({})

    def delete_checkpoint(self, run_id: str, segment: str, name: str, tenant: str) -> Reply:
        self.get(run_id, tenant)
        self._store.delete(run_id, segment, name)
        return Reply.json({})

    def _owned(self, tenant: str) -> list[Run]:
        """The tenant's runs, recorded and live, oldest first."""
        owned = []
        for run_id in self._store.run_ids():
            try:
                owned.append(self.get(run_id, tenant))
            except HttpError:
                continue
        return owned

    def _training_run(self, run: Run) -> dict[str, Any]:
        last: dict[str, dict[str, Any]] = {}
        # oldest first: the newest of each kind wins
        for checkpoint in self._store.checkpoints(run.run_id):
            last[checkpoint["checkpoint_type"]] = checkpoint
        return {
            "training_run_id": run.run_id,
            "base_model": run.base_model,
            "model_owner": run.tenant,
            "is_lora": True,
            "corrupted": False,
            "lora_rank": run.lora.rank,
            "last_request_time": iso(run.order.last_request),
            "last_checkpoint": last.get("training"),
            "last_sampler_checkpoint": last.get("sampler"),
            "user_metadata": self._store.run_user_metadata(run.run_id),
        }


def _forward_backward_many(items: list[Any]) -> list[Reply]:
    """Batchable forward_backwards (equal keys: one base, one forward_only) in one pass."""
    requests = [
        Request(run.trainer, request.data, request.loss_fn, request.config)
        for run, request in items
    ]
    results = forward_backward_many(requests, forward_only=items[0][1].forward_only)
    return [encode_forward_backward([o.numpy() for o in out], loss) for out, loss in results]


def _page(query: Mapping[str, str], default_limit: int) -> tuple[int, int]:
    """(offset, limit) of a listing's query, or a 400."""
    try:
        offset = int(query.get("offset", 0))
        limit = int(query.get("limit", default_limit))
    except ValueError:
        raise HttpError(400, "offset and limit must be whole numbers") from None
    if offset < 0 or not 1 <= limit <= 1000:
        raise HttpError(400, "offset must be >= 0 and limit from 1 to 1000")
    return offset, limit
