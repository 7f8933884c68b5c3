"""The Tinker server's samplers: sampling sessions on a base model or a saved adapter,
snapshots of a training run's current weights, and `asample` on either.

A sampler holds its adapter's weights (a copy), so a training run that trains on afterwards
does not change what an earlier snapshot samples.

`asample` requests that wait for the compute thread are sampled together: the first of them
to run takes every waiting request of its base model (up to `MAX_BATCH_ROWS` rows and
`MAX_SAMPLER_ADAPTERS` adapters) into one batch of the decode code, each row on its own
sampler's adapter; the others find their result ready when their turn comes. A sampler is the
tenant's that made it: to any other it answers 404, as a missing one.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import attrs

from .base_model import MAX_SAMPLER_ADAPTERS, LoraSettings
from .errors import HttpError, UserError, checkpoint_name
from .futures import Futures
from .sampling import Sampled, SampleRequest, decode_rows, sample_batch
from .served import ServedModels
from .sessions import Sessions
from .store import checkpoint_meta, load_adapter, save_adapter
from .training_runs import TrainingRuns
from .wire import Reply, encode_sample, prompt_tokens, sample_settings


@attrs.define(eq=False)
class Sampler:
    sampler_id: str
    base_model: str
    model_path: str | None
    lora: LoraSettings | None  # None: the base model
    adapter: dict[str, Any]
    tenant: str


MAX_BATCH_ROWS = 64


@attrs.define(eq=False)
class _Waiting:
    """An `asample` waiting to be sampled, and then its result or its error."""

    sampler: Sampler
    request: SampleRequest
    result: Sampled | None = None
    error: Exception | None = None


@attrs.define
class SamplingSessions:
    """The samplers of one server, by id."""

    _models: ServedModels
    _futures: Futures
    _sessions: Sessions
    _runs: TrainingRuns
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    _samplers: dict[str, Sampler] = attrs.field(factory=dict, init=False)
    _waiting: list[_Waiting] = attrs.field(factory=list, init=False)

    def create_sampling_session(self, body: dict[str, Any], tenant: str) -> Reply:
        self._sessions.require(body, tenant)
        sampler = self._new_sampler(body.get("model_path"), body.get("base_model"), tenant)
        self._add(sampler)
        return Reply.json(
            {"type": "create_sampling_session", "sampling_session_id": sampler.sampler_id}
        )

    def save_weights_for_sampler(self, body: dict[str, Any], tenant: str) -> Reply:
        run = self._runs.live(body.get("model_id"), tenant)
        if body.get("path") is None:  # an ephemeral sampler of the current weights

            def snapshot() -> Reply:
                sampler = Sampler(
                    sampler_id=str(uuid.uuid4()),
                    base_model=run.base_model,
                    model_path=None,
                    lora=run.lora,
                    adapter=run.trainer.adapter(),
                    tenant=tenant,
                )
                self._add(sampler)
                return Reply.json(
                    {"type": "save_weights_for_sampler", "sampling_session_id": sampler.sampler_id}
                )

            return self._runs.queue(run, body.get("seq_id"), snapshot)
        name = checkpoint_name(body.get("path"))
        self._runs.admit_save(run)
        directory = self._runs.store.checkpoint_dir(run.run_id, "sampler_weights", name)
        path = f"tinker://{run.run_id}/sampler_weights/{name}"

        def work() -> Reply:
            if directory.exists():
                raise UserError(f"sampler checkpoint {path} already exists; use a new name")
            meta = {**checkpoint_meta(run.base_model, body), "lora": run.lora.to_json()}
            save_adapter(directory, run.trainer.adapter(), meta)
            return Reply.json({"type": "save_weights_for_sampler", "path": path})

        return self._runs.queue(run, body.get("seq_id"), work)

    def get_sampler(self, sampler_id: str, tenant: str) -> Reply:
        sampler = self._samplers.get(sampler_id)
        if sampler is None or sampler.tenant != tenant:
            raise HttpError(404, f"unknown sampler {sampler_id!r}")
        return Reply.json(
            {
                "sampler_id": sampler.sampler_id,
                "base_model": sampler.base_model,
                "model_path": sampler.model_path,
            }
        )

    def asample(self, body: dict[str, Any], tenant: str) -> Reply:
        if body.get("sampling_session_id") is not None:
            sampler = self._samplers.get(str(body["sampling_session_id"]))
            if sampler is None or sampler.tenant != tenant:
                raise HttpError(404, f"unknown sampling session {body['sampling_session_id']!r}")
        else:
            sampler = self._new_sampler(body.get("model_path"), body.get("base_model"), tenant)
        for key in ("topk_prompt_logprobs", "prompt_alt_tokens_k"):
            if int(body.get(key) or 0) > 0:
                raise HttpError(400, f"this server does not support {key}")
        for key in ("target_prompt_logprobs", "record_stability_info"):
            if body.get(key):
                raise HttpError(400, f"this server does not support {key}")
        prompt = prompt_tokens(body.get("prompt"))
        n = int(body.get("num_samples") or 1)
        settings = sample_settings(body.get("sampling_params") or {})
        topk = int(body.get("topk_sample_logprobs") or 0)
        with_prompt = bool(body.get("prompt_logprobs"))
        # The SDK asserts one id per sample in the promise, and stamps them on the sequences.
        sequence_ids = [f"{sampler.sampler_id}:{body.get('seq_id')}:{i}" for i in range(n)]

        waiting = _Waiting(sampler, SampleRequest(prompt, n, settings, topk, with_prompt))
        with self._lock:
            self._waiting.append(waiting)

        def work() -> Reply:
            if waiting.result is None and waiting.error is None:
                self._sample_waiting()
            if waiting.error is not None:
                raise waiting.error
            assert waiting.result is not None
            rows, prompt_lps = waiting.result
            last_n = body.get("prompt_logprobs_last_n")
            return encode_sample(rows, prompt_lps, topk=topk, last_n=last_n)

        request_id = self._futures.submit(work)
        return Reply.json({"request_id": request_id, "sample_sequence_ids": sequence_ids})

    def _sample_waiting(self) -> None:
        """Sample the oldest waiting request together with those that fit its batch (on
        the compute thread)."""
        with self._lock:
            first = self._waiting[0].sampler.base_model
            taken: list[_Waiting] = []
            rows, adapters = 0, set[int]()
            for waiting in self._waiting:
                sampler = waiting.sampler
                keys = {id(sampler.adapter)} if sampler.lora is not None else set()
                if taken and (
                    sampler.base_model != first
                    or rows + waiting.request.n > MAX_BATCH_ROWS
                    or len(adapters | keys) > MAX_SAMPLER_ADAPTERS
                ):
                    continue
                taken.append(waiting)
                rows += waiting.request.n
                adapters |= keys
            self._waiting = [waiting for waiting in self._waiting if waiting not in taken]
        base = self._models.base(first)
        batch: list[tuple[_Waiting, SampleRequest, list[Any]]] = []
        for waiting in taken:
            sampler = waiting.sampler
            try:
                name = None
                if sampler.lora is not None:
                    name = base.sampler_adapter(sampler.lora, sampler.adapter)
                request = attrs.evolve(waiting.request, adapter=name)
                batch.append((waiting, request, decode_rows(base, request)))
            except UserError as exc:
                waiting.error = exc
        if not batch:
            return
        adapted = any(request.adapter is not None for _, request, _ in batch)
        module = base.sampler_model if adapted else base.module
        try:
            results = sample_batch(base, module, [(request, rows) for _, request, rows in batch])
        except Exception as exc:
            for waiting, _, _ in batch:
                waiting.error = exc
            return
        for (waiting, _, _), result in zip(batch, results):
            waiting.result = result

    def _new_sampler(self, model_path: object, base_model: object, tenant: str) -> Sampler:
        sampler_id = str(uuid.uuid4())
        if model_path is None:
            name = self._runs.check_base(base_model)
            return Sampler(sampler_id, name, None, None, {}, tenant)
        run_id, directory, _segment = self._runs.existing(str(model_path), tenant)
        run = self._runs.get(run_id, tenant)
        try:
            adapter = load_adapter(directory)
        except Exception as exc:
            raise HttpError(400, f"cannot read {model_path}: {exc}") from exc
        return Sampler(sampler_id, run.base_model, str(model_path), run.lora, adapter, tenant)

    def _add(self, sampler: Sampler) -> None:
        with self._lock:
            self._samplers[sampler.sampler_id] = sampler
