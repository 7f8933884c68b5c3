"""The tinker emulator's service: sessions, training runs, samplers, promises and checkpoints.

Every training, saving and sampling request becomes a promise: the POST answers at once with a
`request_id`, the work runs on the one compute thread, and `retrieve_future` long-polls for
the result (`try_again` after `long_poll_s`). Requests on one training run run in `seq_id`
order, as on the service: the SDK may send a later request before an earlier one's POST
returns. Checkpoints are folders under `root/runs/<run id>/{weights,sampler_weights}/<name>`
with a `run.json` per run, so a restarted emulator still lists, serves and resumes them.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs

from .base_model import BaseModel, LoraSettings
from .compute import TrainingRun
from .sampling import sample
from .store import RunStore, checkpoint_meta, iso, load_adapter, save_adapter
from .wire import (
    HttpError,
    Reply,
    UserError,
    adam_settings,
    check_adam_config,
    checkpoint_name,
    decode_forward_backward,
    encode_forward_backward,
    encode_sample,
    failure,
    json_body,
    prompt_tokens,
    sample_settings,
)

logger = logging.getLogger(__name__)

API = "/api/v1"
_MAX_KEPT_RESULTS = 4096


@attrs.define(eq=False)
class _Promise:
    done: threading.Event = attrs.Factory(threading.Event)
    reply: Reply | None = None


@attrs.define(eq=False)
class _Run:
    run_id: str
    base_model: str
    lora: LoraSettings
    session_id: str | None  # None: recorded on disk by an earlier emulator, not live here
    built: TrainingRun | None = None  # made by the run's first request, on the compute thread
    next_seq: int = 1
    pending: dict[int, tuple[Callable[[], Reply], _Promise]] = attrs.Factory(dict)
    lock: threading.Lock = attrs.Factory(threading.Lock)
    last_request: float = attrs.Factory(time.time)

    @property
    def trainer(self) -> TrainingRun:
        if self.built is None:
            raise UserError(f"training run {self.run_id} was not created successfully")
        return self.built


@attrs.define(eq=False)
class _Sampler:
    sampler_id: str
    base_model: str
    model_path: str | None
    lora: LoraSettings | None  # None: the base model
    adapter: dict[str, Any]


class TinkerService:
    """The protocol behind the HTTP server; `handle` answers one request."""

    def __init__(
        self,
        base: BaseModel,
        root: Path,
        *,
        names: set[str],
        model_name: str,
        client_config: Mapping[str, Any],
        long_poll_s: float,
    ) -> None:
        self._base = base
        self._store = RunStore(root)
        self._names = set(names)
        self.model_name = model_name
        self.client_config = dict(client_config)
        self.long_poll_s = long_poll_s
        self._compute = ThreadPoolExecutor(1, thread_name_prefix="tinker-emulator-compute")
        self._lock = threading.Lock()
        self._sessions: dict[str, bool] = {}  # id -> finished
        self._runs: dict[str, _Run] = {}
        self._samplers: dict[str, _Sampler] = {}
        self._promises: OrderedDict[str, _Promise] = OrderedDict()
        self.route_counts: Counter[str] = Counter()  # "METHOD route" -> requests served

    def close(self) -> None:
        """Finish the running work, drop the queued work, fail what is still pending."""
        self._compute.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for promise in self._promises.values():
                if not promise.done.is_set():
                    promise.reply = failure("the tinker emulator stopped", "server")
                    promise.done.set()

    # --- routing ------------------------------------------------------------------------

    def handle(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> Reply:
        path = urlsplit(target).path
        if not path.startswith(API + "/"):
            raise HttpError(404, f"no route {method} {path}")
        route = path[len(API) + 1 :]
        with self._lock:
            self.route_counts[f"{method} {route}"] += 1
        if method == "POST":
            if route == "forward_backward":
                return self._forward_backward(body, headers)
            handler = self._posts().get(route)
            if handler is not None:
                return handler(json_body(body))
            match = re.fullmatch(r"sessions/([^/]+)/finish", route)
            if match:
                return self._finish_session(match.group(1))
        elif method == "GET":
            if route == "healthz":
                return Reply.json({"status": "ok"})
            if route == "get_server_capabilities":
                return self._capabilities()
            match = re.fullmatch(r"samplers/([^/]+)", route)
            if match:
                return self._get_sampler(match.group(1))
            match = re.fullmatch(r"training_runs/([^/]+)/checkpoints", route)
            if match:
                return self._list_checkpoints(match.group(1))
            match = re.fullmatch(r"training_runs/([^/]+)", route)
            if match:
                return self._get_training_run(match.group(1))
        elif method == "DELETE":
            match = re.fullmatch(r"training_runs/([^/]+)/checkpoints/([^/]+)/([^/]+)", route)
            if match:
                return self._delete_checkpoint(*match.groups())
        raise HttpError(404, f"the tinker emulator has no route {method} /api/v1/{route}")

    def _posts(self) -> dict[str, Callable[[dict[str, Any]], Reply]]:
        return {
            "client/config": lambda _b: Reply.json(self.client_config),
            "client/dynamic_config": lambda _b: Reply.json({}),
            "create_session": self._create_session,
            "session_heartbeat": self._heartbeat,
            "telemetry": lambda _b: Reply.json({"status": "accepted"}),
            "create_model": self._create_model,
            "get_info": self._get_info,
            "optim_step": self._optim_step,
            "save_weights": self._save_weights,
            "save_weights_for_sampler": self._save_weights_for_sampler,
            "load_weights": self._load_weights,
            "create_sampling_session": self._create_sampling_session,
            "asample": self._asample,
            "retrieve_future": self._retrieve_future,
            "cancel_future": lambda _b: Reply.json({}),
        }

    # --- sessions -----------------------------------------------------------------------

    def _create_session(self, body: dict[str, Any]) -> Reply:
        session_id = str(uuid.uuid4())
        with self._lock:
            self._sessions[session_id] = False
        return Reply.json({"type": "create_session", "session_id": session_id})

    def _heartbeat(self, body: dict[str, Any]) -> Reply:
        finished = self._sessions.get(str(body.get("session_id")))
        if finished is None:
            raise HttpError(404, f"unknown session {body.get('session_id')!r}")
        if finished:
            raise HttpError(410, "the session has finished")
        return Reply.json({"type": "session_heartbeat"})

    def _finish_session(self, session_id: str) -> Reply:
        with self._lock:
            if session_id not in self._sessions:
                raise HttpError(404, f"unknown session {session_id!r}")
            self._sessions[session_id] = True
        return Reply.json({})

    def _session(self, body: Mapping[str, Any]) -> str:
        session_id = str(body.get("session_id"))
        finished = self._sessions.get(session_id)
        if finished is None:
            raise HttpError(404, f"unknown session {session_id!r}; call create_session first")
        if finished:
            raise HttpError(410, f"session {session_id} has finished")
        return session_id

    # --- promises -----------------------------------------------------------------------

    def _promise(self) -> tuple[str, _Promise]:
        request_id = str(uuid.uuid4())
        promise = _Promise()
        with self._lock:
            self._promises[request_id] = promise
            while len(self._promises) > _MAX_KEPT_RESULTS:
                oldest = next(iter(self._promises))
                if not self._promises[oldest].done.is_set():
                    break
                del self._promises[oldest]
        return request_id, promise

    def _submit(self, work: Callable[[], Reply], promise: _Promise) -> None:
        assert self._compute is not None
        self._compute.submit(self._run_work, work, promise)

    def _run_work(self, work: Callable[[], Reply], promise: _Promise) -> None:
        try:
            promise.reply = work()
        except UserError as exc:
            promise.reply = failure(str(exc), "user")
        except Exception as exc:
            logger.exception("tinker emulator request failed")
            promise.reply = failure(f"{type(exc).__name__}: {exc}", "server")
        finally:
            promise.done.set()

    def _ordered(self, run: _Run, seq_id: object, work: Callable[[], Reply]) -> str:
        """Queue `work` as request `seq_id` of `run`; requests run in seq_id order."""
        if isinstance(seq_id, bool) or not isinstance(seq_id, int):
            raise HttpError(400, f"seq_id must be an integer, got {seq_id!r}")
        request_id, promise = self._promise()
        with run.lock:
            if seq_id < run.next_seq or seq_id in run.pending:
                raise HttpError(400, f"seq_id {seq_id} of model {run.run_id} was already used")
            run.pending[seq_id] = (work, promise)
            run.last_request = time.time()
            while run.next_seq in run.pending:
                queued, queued_promise = run.pending.pop(run.next_seq)
                self._submit(queued, queued_promise)
                run.next_seq += 1
        return request_id

    def _retrieve_future(self, body: dict[str, Any]) -> Reply:
        request_id = str(body.get("request_id"))
        promise = self._promises.get(request_id)
        if promise is None:
            raise HttpError(404, f"unknown request_id {request_id!r}")
        if not promise.done.wait(self.long_poll_s):
            return Reply.json(
                {"type": "try_again", "request_id": request_id, "queue_state": "active"}
            )
        assert promise.reply is not None
        return promise.reply

    # --- training -----------------------------------------------------------------------

    def _create_model(self, body: dict[str, Any]) -> Reply:
        session_id = self._session(body)
        self._check_base(body.get("base_model"))
        lora = body.get("lora_config")
        if not isinstance(lora, dict):
            raise HttpError(400, "the tinker emulator trains LoRA only; pass a lora_config")
        check_adam_config(body.get("optimizer_config"))
        settings = LoraSettings.from_json(lora)
        run = _Run(
            run_id=str(uuid.uuid4()),
            base_model=str(body["base_model"]),
            lora=settings,
            session_id=session_id,
        )
        self._store.write_run(run.run_id, run.base_model, run.lora, run.session_id)
        with self._lock:
            self._runs[run.run_id] = run
        request_id, promise = self._promise()

        def work() -> Reply:
            run.built = TrainingRun(self._base, settings)
            return Reply.json({"type": "create_model", "model_id": run.run_id})

        self._submit(work, promise)
        return Reply.json({"request_id": request_id, "model_id": run.run_id})

    def _load_weights(self, body: dict[str, Any]) -> Reply:
        path = str(body.get("path"))
        source_id, directory, segment = self._store.existing(path)
        with_optimizer = bool(body.get("optimizer"))
        if with_optimizer and segment != "weights":
            raise HttpError(
                400,
                f"{path} holds sampler weights; load optimizer state from a "
                "save_state checkpoint (tinker://<run>/weights/<name>)",
            )
        source = self._run(source_id)
        if body.get("session_id") is not None:  # create-via-load: a new training run
            session_id = self._session(body)
            if body.get("base_model") is not None:
                self._check_base(body.get("base_model"))
            run = _Run(
                run_id=f"{session_id}:train:{body.get('model_seq_id')}",
                base_model=source.base_model,
                lora=source.lora,
                session_id=session_id,
            )
            with self._lock:
                if run.run_id in self._runs:
                    raise HttpError(400, f"model {run.run_id} already exists")
                self._runs[run.run_id] = run
            self._store.write_run(run.run_id, run.base_model, run.lora, run.session_id)
            request_id, promise = self._promise()

            def create() -> Reply:
                run.built = TrainingRun(self._base, run.lora)
                run.trainer.load(directory, with_optimizer=with_optimizer)
                return Reply.json({"type": "load_weights", "path": path, "model_id": run.run_id})

            self._submit(create, promise)
            return Reply.json({"request_id": request_id, "model_id": run.run_id})
        run = self._live_run(body.get("model_id"))

        def load() -> Reply:
            if run.lora != source.lora:
                raise _user_error(f"{path} has LoRA settings {source.lora}, model has {run.lora}")
            run.trainer.load(directory, with_optimizer=with_optimizer)
            return Reply.json({"type": "load_weights", "path": path, "model_id": run.run_id})

        request_id = self._ordered(run, body.get("seq_id"), load)
        return Reply.json({"request_id": request_id, "model_id": run.run_id})

    def _get_info(self, body: dict[str, Any]) -> Reply:
        run = self._run(str(body.get("model_id")))
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

    def _forward_backward(self, body: bytes, headers: Mapping[str, str]) -> Reply:
        request = decode_forward_backward(body, headers)
        run = self._live_run(request.model_id)

        def work() -> Reply:
            outputs, loss_sum = run.trainer.forward_backward(
                request.data, request.loss_fn, request.config, forward_only=request.forward_only
            )
            return encode_forward_backward([o.numpy() for o in outputs], loss_sum)

        request_id = self._ordered(run, request.seq_id, work)
        return Reply.json({"request_id": request_id, "model_id": run.run_id})

    def _optim_step(self, body: dict[str, Any]) -> Reply:
        run = self._live_run(body.get("model_id"))
        adam = adam_settings(body)

        def work() -> Reply:
            return Reply.json({"metrics": run.trainer.optim_step(adam)})

        request_id = self._ordered(run, body.get("seq_id"), work)
        return Reply.json({"request_id": request_id, "model_id": run.run_id})

    def _save_weights(self, body: dict[str, Any]) -> Reply:
        run = self._live_run(body.get("model_id"))
        name = checkpoint_name(body.get("path"))
        directory = self._store.checkpoint_dir(run.run_id, "weights", name)
        overwrite = bool(body.get("overwrite"))
        path = f"tinker://{run.run_id}/weights/{name}"

        def work() -> Reply:
            if directory.exists() and not overwrite:
                raise _user_error(f"checkpoint {path} exists; pass overwrite=True to replace it")
            meta = checkpoint_meta(run.base_model, body)
            run.trainer.save(directory, meta=meta, with_optimizer=True)
            return Reply.json({"type": "save_weights", "path": path})

        request_id = self._ordered(run, body.get("seq_id"), work)
        return Reply.json({"request_id": request_id, "model_id": run.run_id})

    def _save_weights_for_sampler(self, body: dict[str, Any]) -> Reply:
        run = self._live_run(body.get("model_id"))
        if body.get("path") is None:  # an ephemeral sampler of the current weights

            def snapshot() -> Reply:
                sampler = _Sampler(
                    sampler_id=str(uuid.uuid4()),
                    base_model=run.base_model,
                    model_path=None,
                    lora=run.lora,
                    adapter=run.trainer.adapter(),
                )
                with self._lock:
                    self._samplers[sampler.sampler_id] = sampler
                return Reply.json(
                    {"type": "save_weights_for_sampler", "sampling_session_id": sampler.sampler_id}
                )

            request_id = self._ordered(run, body.get("seq_id"), snapshot)
            return Reply.json({"request_id": request_id, "model_id": run.run_id})
        name = checkpoint_name(body.get("path"))
        directory = self._store.checkpoint_dir(run.run_id, "sampler_weights", name)
        path = f"tinker://{run.run_id}/sampler_weights/{name}"

        def work() -> Reply:
            if directory.exists():
                raise _user_error(f"sampler checkpoint {path} already exists; use a new name")
            meta = {**checkpoint_meta(run.base_model, body), "lora": run.lora.to_json()}
            save_adapter(directory, run.trainer.adapter(), meta)
            return Reply.json({"type": "save_weights_for_sampler", "path": path})

        request_id = self._ordered(run, body.get("seq_id"), work)
        return Reply.json({"request_id": request_id, "model_id": run.run_id})

    # --- sampling -----------------------------------------------------------------------

    def _create_sampling_session(self, body: dict[str, Any]) -> Reply:
        self._session(body)
        sampler = self._new_sampler(body.get("model_path"), body.get("base_model"))
        with self._lock:
            self._samplers[sampler.sampler_id] = sampler
        return Reply.json(
            {"type": "create_sampling_session", "sampling_session_id": sampler.sampler_id}
        )

    def _new_sampler(self, model_path: object, base_model: object) -> _Sampler:
        sampler_id = str(uuid.uuid4())
        if model_path is None:
            self._check_base(base_model)
            return _Sampler(sampler_id, str(base_model), None, None, {})
        run_id, directory, _segment = self._store.existing(str(model_path))
        run = self._run(run_id)
        try:
            adapter = load_adapter(directory)
        except Exception as exc:
            raise HttpError(400, f"cannot read {model_path}: {exc}") from exc
        return _Sampler(sampler_id, run.base_model, str(model_path), run.lora, adapter)

    def _get_sampler(self, sampler_id: str) -> Reply:
        sampler = self._samplers.get(sampler_id)
        if sampler is None:
            raise HttpError(404, f"unknown sampler {sampler_id!r}")
        return Reply.json(
            {
                "sampler_id": sampler.sampler_id,
                "base_model": sampler.base_model,
                "model_path": sampler.model_path,
            }
        )

    def _asample(self, body: dict[str, Any]) -> Reply:
        if body.get("sampling_session_id") is not None:
            sampler = self._samplers.get(str(body["sampling_session_id"]))
            if sampler is None:
                raise HttpError(404, f"unknown sampling session {body['sampling_session_id']!r}")
        else:
            sampler = self._new_sampler(body.get("model_path"), body.get("base_model"))
        for key in ("topk_prompt_logprobs", "prompt_alt_tokens_k"):
            if int(body.get(key) or 0) > 0:
                raise HttpError(400, f"the tinker emulator does not support {key}")
        for key in ("target_prompt_logprobs", "record_stability_info"):
            if body.get(key):
                raise HttpError(400, f"the tinker emulator does not support {key}")
        prompt = prompt_tokens(body.get("prompt"))
        n = int(body.get("num_samples") or 1)
        settings = sample_settings(body.get("sampling_params") or {})
        topk = int(body.get("topk_sample_logprobs") or 0)
        with_prompt = bool(body.get("prompt_logprobs"))
        request_id, promise = self._promise()
        # The SDK asserts one id per sample in the promise, and stamps them on the sequences.
        sequence_ids = [f"{sampler.sampler_id}:{body.get('seq_id')}:{i}" for i in range(n)]

        def work() -> Reply:
            module = self._base.sampler_module(sampler.lora, sampler.adapter)
            rows, prompt_lps = sample(
                self._base, module, prompt, n, settings, topk=topk, prompt_logprobs=with_prompt
            )
            last_n = body.get("prompt_logprobs_last_n")
            return encode_sample(rows, prompt_lps, topk=topk, last_n=last_n)

        self._submit(work, promise)
        return Reply.json({"request_id": request_id, "sample_sequence_ids": sequence_ids})

    # --- checkpoints (REST) -------------------------------------------------------------

    def _list_checkpoints(self, run_id: str) -> Reply:
        self._run(run_id)
        return Reply.json({"checkpoints": self._store.checkpoints(run_id), "cursor": None})

    def _get_training_run(self, run_id: str) -> Reply:
        run = self._run(run_id)
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
                "last_request_time": iso(run.last_request),
                "last_checkpoint": last.get("training"),
                "last_sampler_checkpoint": last.get("sampler"),
                "user_metadata": None,
            }
        )

    def _delete_checkpoint(self, run_id: str, segment: str, name: str) -> Reply:
        self._run(run_id)
        self._store.delete(run_id, segment, name)
        return Reply.json({})

    def _capabilities(self) -> Reply:
        return Reply.json(
            {
                "supported_models": [
                    {
                        "model_name": self.model_name,
                        "max_context_length": self._base.context_length,
                        "trainable": True,
                        "sampleable": True,
                    }
                ]
            }
        )

    # --- runs and files -----------------------------------------------------------------

    def _check_base(self, base_model: object) -> None:
        if base_model not in self._names:
            raise HttpError(
                400,
                f"base model {base_model!r} is not served by this emulator; it serves "
                f"{self.model_name!r}",
            )

    def _run(self, run_id: str) -> _Run:
        """A run of this emulator's lifetime, or one recorded in `state_dir` (not live)."""
        with self._lock:
            run = self._runs.get(run_id)
        if run is not None:
            return run
        recorded = self._store.read_run(run_id)
        if recorded is None:
            raise HttpError(404, f"unknown training run {run_id!r}")
        run = _Run(run_id=run_id, base_model=recorded[0], lora=recorded[1], session_id=None)
        with self._lock:
            return self._runs.setdefault(run_id, run)

    def _live_run(self, model_id: object) -> _Run:
        run = self._run(str(model_id))
        if run.session_id is None:
            raise HttpError(
                400,
                f"training run {model_id} is not live in this emulator (it was restarted); "
                "create a training client from one of its saved states",
            )
        return run


def _user_error(message: str) -> Exception:
    return UserError(message)
