"""The tinker emulator's training runs: creating and loading them, their training requests,
saving their state, and the REST view of their checkpoints.

A run lives as long as the emulator that created it; its record (`run.json`) and checkpoints
stay on disk, so a restarted emulator still lists, serves and resumes from them, but trains a
recorded run only through a new run loaded from one of its saved states.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .base_model import BaseModel, LoraSettings
from .compute import TrainingRun
from .errors import HttpError, UserError, checkpoint_name
from .futures import Futures, RequestOrder, Work
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
    session_id: str | None  # None: recorded on disk by an earlier emulator, not live here
    built: TrainingRun | None = None  # made by the run's first request, on the compute thread
    order: RequestOrder = attrs.Factory(RequestOrder)

    @property
    def trainer(self) -> TrainingRun:
        if self.built is None:
            raise UserError(f"training run {self.run_id} was not created successfully")
        return self.built


def _name_set(names: Iterable[str]) -> frozenset[str]:
    return frozenset(names)


@attrs.define
class TrainingRuns:
    """The training runs of one emulator (live ones, and recorded ones looked up on demand)."""

    _base: BaseModel
    _store: RunStore
    _futures: Futures
    _sessions: Sessions
    _names: frozenset[str] = attrs.field(kw_only=True, converter=_name_set)
    _model_name: str = attrs.field(kw_only=True)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    _runs: dict[str, Run] = attrs.field(factory=dict, init=False)

    # --- finding runs -------------------------------------------------------------------

    def check_base(self, base_model: object) -> None:
        if base_model not in self._names:
            raise HttpError(
                400,
                f"base model {base_model!r} is not served by this emulator; it serves "
                f"{self._model_name!r}",
            )

    def get(self, run_id: str) -> Run:
        """A run of this emulator's lifetime, or one recorded in `state_dir` (not live)."""
        with self._lock:
            run = self._runs.get(run_id)
        if run is not None:
            return run
        recorded = self._store.read_run(run_id)
        if recorded is None:
            raise HttpError(404, f"unknown training run {run_id!r}")
        run = Run(run_id=run_id, base_model=recorded[0], lora=recorded[1], session_id=None)
        with self._lock:
            return self._runs.setdefault(run_id, run)

    def live(self, model_id: object) -> Run:
        run = self.get(str(model_id))
        if run.session_id is None:
            raise HttpError(
                400,
                f"training run {model_id} is not live in this emulator (it was restarted); "
                "create a training client from one of its saved states",
            )
        return run

    def queue(self, run: Run, seq_id: object, work: Work) -> Reply:
        """Queue `work` as request `seq_id` of `run`; the reply that names its promise."""
        request_id = self._futures.ordered(run.order, seq_id, work, model_id=run.run_id)
        return Reply.json({"request_id": request_id, "model_id": run.run_id})

    # --- creating and loading -----------------------------------------------------------

    def create_model(self, body: dict[str, Any]) -> Reply:
        session_id = self._sessions.require(body)
        self.check_base(body.get("base_model"))
        lora = body.get("lora_config")
        if not isinstance(lora, dict):
            raise HttpError(400, "the tinker emulator trains LoRA only; pass a lora_config")
        check_adam_config(body.get("optimizer_config"))
        metadata = run_metadata(body)
        settings = LoraSettings.from_json(lora)
        run = Run(
            run_id=str(uuid.uuid4()),
            base_model=str(body["base_model"]),
            lora=settings,
            session_id=session_id,
        )
        self._store.write_run(run.run_id, run.base_model, run.lora, run.session_id, metadata)
        with self._lock:
            self._runs[run.run_id] = run

        def work() -> Reply:
            run.built = TrainingRun(self._base, settings)
            return Reply.json({"type": "create_model", "model_id": run.run_id})

        request_id = self._futures.submit(work)
        return Reply.json({"request_id": request_id, "model_id": run.run_id})

    def load_weights(self, body: dict[str, Any]) -> Reply:
        path = str(body.get("path"))
        source_id, directory, segment = self._store.existing(path)
        with_optimizer = bool(body.get("optimizer"))
        if with_optimizer and segment != "weights":
            raise HttpError(
                400,
                f"{path} holds sampler weights; load optimizer state from a "
                "save_state checkpoint (tinker://<run>/weights/<name>)",
            )
        source = self.get(source_id)
        if body.get("session_id") is not None:  # create-via-load: a new training run
            session_id = self._sessions.require(body)
            metadata = run_metadata(body)
            if body.get("base_model") is not None:
                self.check_base(body.get("base_model"))
            run = Run(
                run_id=f"{session_id}:train:{body.get('model_seq_id')}",
                base_model=source.base_model,
                lora=source.lora,
                session_id=session_id,
            )
            with self._lock:
                if run.run_id in self._runs:
                    raise HttpError(400, f"model {run.run_id} already exists")
                self._runs[run.run_id] = run
            self._store.write_run(run.run_id, run.base_model, run.lora, run.session_id, metadata)

            def create() -> Reply:
                run.built = TrainingRun(self._base, run.lora)
                run.trainer.load(directory, with_optimizer=with_optimizer)
                return Reply.json({"type": "load_weights", "path": path, "model_id": run.run_id})

            request_id = self._futures.submit(create)
            return Reply.json({"request_id": request_id, "model_id": run.run_id})
        run = self.live(body.get("model_id"))

        def load() -> Reply:
            if run.lora != source.lora:
                raise UserError(f"{path} has LoRA settings {source.lora}, model has {run.lora}")
            run.trainer.load(directory, with_optimizer=with_optimizer)
            return Reply.json({"type": "load_weights", "path": path, "model_id": run.run_id})

        return self.queue(run, body.get("seq_id"), load)

    def get_info(self, body: dict[str, Any]) -> Reply:
        run = self.get(str(body.get("model_id")))
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

    def forward_backward(self, body: bytes, headers: Mapping[str, str]) -> Reply:
        request = decode_forward_backward(body, headers)
        run = self.live(request.model_id)

        def work() -> Reply:
            outputs, loss_sum = run.trainer.forward_backward(
                request.data, request.loss_fn, request.config, forward_only=request.forward_only
            )
            return encode_forward_backward([o.numpy() for o in outputs], loss_sum)

        return self.queue(run, request.seq_id, work)

    def optim_step(self, body: dict[str, Any]) -> Reply:
        run = self.live(body.get("model_id"))
        adam = adam_settings(body)

        def work() -> Reply:
            return Reply.json({"metrics": run.trainer.optim_step(adam)})

        return self.queue(run, body.get("seq_id"), work)

    def save_weights(self, body: dict[str, Any]) -> Reply:
        run = self.live(body.get("model_id"))
        name = checkpoint_name(body.get("path"))
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

    def list_checkpoints(self, run_id: str) -> Reply:
        self.get(run_id)
        return Reply.json({"checkpoints": self._store.checkpoints(run_id), "cursor": None})

    def get_training_run(self, run_id: str) -> Reply:
        run = self.get(run_id)
        last: dict[str, dict[str, Any]] = {}
        for checkpoint in self._store.checkpoints(
            run.run_id
        ):  # oldest first: the newest of each kind wins
            last[checkpoint["checkpoint_type"]] = checkpoint
        return Reply.json(
            {
                "training_run_id": run.run_id,
                "base_model": run.base_model,
                "model_owner": "tinker-emulator",
                "is_lora": True,
                "corrupted": False,
                "lora_rank": run.lora.rank,
                "last_request_time": iso(run.order.last_request),
                "last_checkpoint": last.get("training"),
                "last_sampler_checkpoint": last.get("sampler"),
                "user_metadata": self._store.run_user_metadata(run.run_id),
            }
        )

    def set_checkpoint_ttl(self, run_id: str, segment: str, name: str, body: Any) -> Reply:
        self.get(run_id)
        self._store.set_ttl(run_id, segment, name, body.get("ttl_seconds"))
        return Reply.json({})

    def delete_checkpoint(self, run_id: str, segment: str, name: str) -> Reply:
        self.get(run_id)
        self._store.delete(run_id, segment, name)
        return Reply.json({})
