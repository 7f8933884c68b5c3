"""ServerlessBackend: a TrainingBackend that trains on a remote training server over HTTP.

    backend = ServerlessBackend("http://gpu-box:8000/v1", api_key="ak-...")

It speaks the hosted serverless training API's wire (wire.py), as ART's own ServerlessBackend
does, so `arthex serve` serves both clients. `base_url` and `api_key` come from the
arguments, else from `ARTHEX_SERVERLESS_URL` and `ARTHEX_API_KEY` (then `WANDB_API_KEY`);
with no URL at all it is the hosted service's, `https://api.training.wandb.ai/v1`. The base
URL ends in `/v1` (a server root without it gets it added). Only the trajectory groups and
the config travel; the history and the parquet files stay with the frontend, and the
checkpoints stay on the server. Models are served at the same base URL as
`wandb-artifact:///{entity}/{project}/{name}:step{N}`.

Requests go through a `ServerlessTransport` (transport.py), the HTTP layer it shares with the
hosted API's resource client (api.py): GET, PUT and DELETE are retried with exponential backoff
on connection errors, 429 and 500/502/503/504; a POST is retried only on a 429
`rate_limit_exceeded` (refused before the server acted), never otherwise. Training events are
read with a cursor that advances past every event (the long poll returns as soon as one
arrives), so a client that reconnects, or another one given the job id and cursor, reads
each event exactly once.

One trainer per model: the server's trainer is this process (the holder it names is "pid 4242
on gpu-box-1"), with a lease id of its own per server and key, which every ServerlessBackend
of the process sends with `register` and on every request after (the server's leases.py says
how the lease is granted, renewed and given back). So a notebook that builds a new backend
and model after a server restart, or a script whose `main()` runs twice, takes its models
back without waiting for the old lease to expire. Within the process, the models' own run
leases keep one trainer per run (the client offers `Capability.ONE_TRAINER`: a model takes
its run's lease at register, and a second live model of the process on the run is refused).
While registered a backend renews each model's lease every third of the server's TTL (a
backend dropped without `close` stops renewing once collected), and `close()` gives back the
leases no other open backend of the process still uses. A second process that registers a
model another trainer holds gets RunBusyError naming that trainer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
import weakref
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ...core.backend_train import BackendTrainEntry
from ...core.config import TrainConfig
from ...core.conversations import Conversation
from ...core.errors import (
    ArthexError,
    InvalidInputError,
    NotRegisteredError,
    RunBusyError,
)
from ...core.identity import ModelSpec, RunRef
from ...core.lease_book import release_leases
from ...core.sft import TrainSFTConfig
from ...core.trajectories import TrajectoryGroup
from ...ports.training_backend import (
    BackendCapabilities,
    Capability,
    ExportFormat,
    InferenceEndpoint,
    SupervisedFineTuning,
    TrainingBackend,
)
from ..train_results import ServerlessTrainResult
from . import export, wire
from .errors import TrainingJobFailed
from .transport import HOSTED_KEY_ENV as HOSTED_KEY_ENV  # where the CLI and users read them
from .transport import KEY_ENV as KEY_ENV
from .transport import URL_ENV as URL_ENV
from .transport import ServerlessTransport, server_of

if TYPE_CHECKING:
    import httpx

    from ...core.model import TrainResult

EMPTY_POLL_PAUSE_S = 1.0
LEASE_HEADER = "X-Arthex-Lease"
HOLDER_HEADER = "X-Arthex-Lease-Holder"
# ART's ServerlessBackend sends every train option it has in `experimental_config`; these
# are what arthex's TrainConfig says of them (its own fields travel too, when not default).
_FIXED_OPTIONS: dict[str, Any] = {
    "advantage_balance": 0.0,
    "importance_sampling_level": "token",
    "kimi_k2_tau": None,
    "kl_penalty_step_lag": None,
    "kl_ref_adapter_path": None,
    "logprob_calculation_chunk_size": 1024,
    "mask_prob_ratio": False,
    "max_negative_advantage_importance_sampling_weight": None,
    "num_trajectories_learning_rate_multiplier_power": 0.0,
    "plot_tensors": False,
    "precalculate_logprobs": False,
    "truncated_importance_sampling": None,
}
_SHARED_FIELDS = (
    "allow_training_without_logprobs",
    "epsilon",
    "epsilon_high",
    "kl_penalty_coef",
    "kl_penalty_reference_step",
    "kl_penalty_source",
    "learning_rate",
    "loss_fn",
    "packed_sequence_length",
    "scale_learning_rate_by_reward_std_dev",
    "scale_rewards",
)

logger = logging.getLogger("arthex.serverless")


@attrs.frozen
class JobEvent:
    """One training-job event. `id` is the cursor to resume after it."""

    id: str
    type: str
    data: Mapping[str, Any]
    created_at: str | None = None


class ServerlessBackend(BackendTrainEntry):
    """Train and serve on an arthex training server (or any server speaking its API).

    `timeout` is per request (a long poll adds `poll_wait_s`), `retries` how often a GET or
    DELETE is retried, `backoff_s` the first retry's delay (doubled each time, with jitter,
    capped at 8 s; a Retry-After header wins). `transport` is an httpx transport for
    custom networking (a proxy, a unix socket); the capabilities lookup before `register`
    does not use it."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        poll_wait_s: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        url, key = server_of(base_url, api_key, "ServerlessBackend")
        if not 0 <= poll_wait_s <= 30:
            raise InvalidInputError(f"poll_wait_s must be in [0, 30], got {poll_wait_s!r}")
        self.lease_id = _process_lease_id(wire.api_base(url), key)
        self._http = ServerlessTransport(
            url,
            key,
            timeout=timeout,
            retries=retries,
            backoff_s=backoff_s,
            headers={LEASE_HEADER: self.lease_id},
            transport=transport,
        )
        self.base_url = self._http.base_url
        self.api_key = key
        self.timeout = timeout
        self.poll_wait_s = poll_wait_s
        self._model_ids: dict[RunRef, str] = {}
        self._entities: dict[RunRef, str] = {}  # whose model the server says it is
        self._capabilities: BackendCapabilities | None = None
        self.holder = f"pid {os.getpid()} on {socket.gethostname()}"
        self._heartbeats: dict[RunRef, asyncio.Task[None]] = {}
        _OPEN.add(self)

    # --- capabilities -------------------------------------------------------------------

    @property
    def capabilities(self) -> BackendCapabilities:
        """The server's backend's capabilities. Known after `register`; before it, the
        first access asks the server (a blocking GET, once)."""
        if self._capabilities is None:
            response = self._http.sync_get(wire.BACKEND_PATH)
            self._capabilities = _offered(response.json()["capabilities"])
        return self._capabilities

    async def _caps(self) -> BackendCapabilities:
        if self._capabilities is None:
            response = await self._request("GET", wire.BACKEND_PATH)
            self._capabilities = _offered(response.json()["capabilities"])
        return self._capabilities

    # --- the port -----------------------------------------------------------------------

    async def register(self, model: ModelSpec) -> InferenceEndpoint | None:
        """Register (or find) `project/name` on the server; the endpoint is the server's
        OpenAI-compatible proxy for this project, with this client's key. `base_path` is not
        sent: the server keeps checkpoints under its own state directory, and `base_model`
        names a model the server can load (a hub id, or a directory on the server)."""
        if not model.trainable:
            return None
        body: dict[str, Any] = {
            "entity": None,  # the key's own
            "project": model.run.project,
            "name": model.run.name,
            "base_model": model.base_model,
            "return_existing": True,
        }
        if model.config:
            body["config"] = dict(model.config)
        holder = {HOLDER_HEADER: self.holder}  # with the lease header: take the lease
        payload = (await self._request("POST", wire.MODELS_PATH, json=body, headers=holder)).json()
        self._model_ids[model.run] = str(payload["id"])
        if payload.get("entity"):
            self._entities[model.run] = str(payload["entity"])
        lease = payload.get("lease")
        beating = self._heartbeats.get(model.run)
        if isinstance(lease, Mapping) and (beating is None or beating.done()):
            # a beat that ended (its lease lost, its event loop gone) starts again
            ttl = float(lease.get("ttl_s") or 60.0)
            self._heartbeats[model.run] = asyncio.create_task(
                _heartbeat(weakref.ref(self), model.run, ttl), name=f"lease-{model.run}"
            )
        if "capabilities" in payload:
            self._capabilities = _offered(payload["capabilities"])
        if not payload.get("inference"):
            return None
        return InferenceEndpoint(
            base_url=self.base_url,
            api_key=self.api_key,
            model_name=wire.artifact_name(
                str(payload["entity"]), model.run.project, model.run.name
            ),
            step_format="{name}:step{step}",
        )

    async def get_step(self, run: RunRef) -> int:
        """The newest checkpoint's step (the first of the list in descending order)."""
        page = await self._checkpoint_page(run, {"limit": "1", "order": "desc"})
        return int(page["data"][0]["step"]) if page["data"] else 0

    def train_result(self, run: RunRef, result: TrainResult) -> ServerlessTrainResult:
        """`backend.train`'s result with the name the server keeps the new step under,
        `{entity}/{project}/{name}:step{N}`, as ART's ServerlessBackend returns it."""
        entity = self._entities.get(run)
        name = None if entity is None else f"{entity}/{run.project}/{run.name}:step{result.step}"
        return ServerlessTrainResult(result.step, result.metrics, artifact_name=name)

    def remote_of(self, run: RunRef) -> dict[str, str]:
        """Where the run lives, for the client's model.json: the server and its model id."""
        return {"server": self.base_url, "model_id": self._model_id(run)}

    async def export(
        self, run: RunRef, out_dir: str, *, step: int | None = None, format: ExportFormat = "merged"
    ) -> str:
        """Fetch a step's checkpoint files from the server and export them here (export.py)."""
        path = await asyncio.to_thread(
            export.export_remote,
            self.base_url,
            self.api_key,
            self._model_id(run),
            out_dir,
            step=step,
            format=format,
            timeout=max(self.timeout, 600.0),
        )
        return str(path)

    async def checkpoint_steps(self, run: RunRef) -> list[int]:
        steps: list[int] = []
        params: dict[str, str] = {}
        while True:
            page = await self._checkpoint_page(run, params)
            steps += [int(item["step"]) for item in page["data"]]
            if not page.get("has_more") or not page["data"]:
                return sorted(steps)
            params = {"after": str(page["data"][-1]["id"])}

    async def delete_checkpoint_files(
        self, run: RunRef, steps_to_keep: Collection[int]
    ) -> list[int]:
        keep = set(steps_to_keep)
        doomed = [step for step in await self.checkpoint_steps(run) if step not in keep]
        if not doomed:
            return []
        path = f"{wire.MODELS_PATH}/{self._model_id(run)}/checkpoints"
        payload = (await self._request("DELETE", path, json={"steps": doomed})).json()
        return sorted(int(step) for step in payload["deleted"])

    async def train_steps(
        self, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        """Create a training job and yield each gradient step's metrics as the server
        reports them; returns when the job ends, raises TrainingJobFailed if it fails."""
        job_id = await self.create_training_job(run, groups, config)
        async for metrics in self._gradient_steps(job_id):
            yield metrics

    async def train_sft(
        self, run: RunRef, conversations: Sequence[Conversation], config: TrainSFTConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        """Create an SFT job on the server and yield each gradient step's metrics as `train`
        does; the conversations travel in the OpenAI fine-tuning format."""
        job_id = await self.create_sft_job(run, conversations, config)
        async for metrics in self._gradient_steps(job_id):
            yield metrics

    async def _gradient_steps(self, job_id: str) -> AsyncIterator[dict[str, float]]:
        async for event in self.job_events(job_id):
            if event.type == wire.GRADIENT_STEP:
                yield wire.decode_event_metrics(event.data)

    async def close(self) -> None:
        """Stop renewing and give back every lease this trainer holds that no other open
        backend of this process (same server, same key) still uses, then close."""
        _OPEN.discard(self)
        heartbeats, self._heartbeats = self._heartbeats, {}
        for task in heartbeats.values():
            with contextlib.suppress(RuntimeError):  # its event loop may be gone
                task.cancel()
        client = self._http.open_client()
        if client is None and heartbeats:
            client = self._http.http()  # give the leases back from this loop
        if client is not None:
            for run in heartbeats:
                if self._shared(run):
                    continue
                path = f"{wire.MODELS_PATH}/{self._model_ids[run]}/lease"
                with contextlib.suppress(Exception):  # best effort: else it expires
                    await client.request("DELETE", path, timeout=min(self.timeout, 10.0))
        try:
            await self._http.aclose()
        finally:
            await release_leases(self)  # the models registered here give their runs back

    def _shared(self, run: RunRef) -> bool:
        """Another open backend of this process holds `run`'s lease on the same server."""
        return any(
            other is not self
            and other.lease_id == self.lease_id
            and other.base_url == self.base_url
            and run in other._heartbeats
            for other in list(_OPEN)
        )

    async def _renew(self, run: RunRef) -> None:
        path = f"{wire.MODELS_PATH}/{self._model_ids[run]}/lease"
        await self._request("PUT", path, json={"id": self.lease_id, "holder": self.holder})

    async def __aenter__(self) -> ServerlessBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- jobs ---------------------------------------------------------------------------

    async def create_training_job(
        self, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
    ) -> str:
        """POST the job (never retried) and return its id."""
        model_id = self._model_id(run)
        if not groups:
            raise InvalidInputError("train got no groups: there is nothing to train on")
        caps = await self._caps()
        caps.check(config, "ServerlessBackend (the server's backend)")
        body = {
            "model_id": model_id,
            "trajectory_groups": [_group_json(group) for group in groups],
            "experimental_config": experimental_config(config),
        }
        return str((await self._request("POST", wire.JOBS_PATH, json=body)).json()["id"])

    async def create_sft_job(
        self, run: RunRef, conversations: Sequence[Conversation], config: TrainSFTConfig
    ) -> str:
        """POST the SFT job (never retried) and return its id; its events are a training
        job's."""
        model_id = self._model_id(run)
        config.plan(len(conversations))  # no conversations, or a wrong rate list: refused here
        (await self._caps()).require(Capability.SFT, "ServerlessBackend (the server's backend)")
        body = {
            "model_id": model_id,
            "conversations": [conversation.to_json() for conversation in conversations],
            "config": config.to_json(),
        }
        return str((await self._request("POST", wire.SFT_JOBS_PATH, json=body)).json()["id"])

    async def job_events(self, job_id: str, *, after: str | None = None) -> AsyncIterator[JobEvent]:
        """The job's events after the cursor `after`, through its terminal event; raises
        TrainingJobFailed at `training_failed`. Stop early and resume later (from any client
        with the same key) by passing the last event's `id` as `after`."""
        cursor = after or "0"
        path = f"{wire.JOBS_PATH}/{job_id}/events"
        while True:
            params = {"after": cursor, "limit": "1000", "wait": str(self.poll_wait_s)}
            asked = time.monotonic()
            page = (
                await self._request("GET", path, params=params, extra_timeout=self.poll_wait_s)
            ).json()
            early = time.monotonic() - asked < self.poll_wait_s / 2 or self.poll_wait_s == 0
            if not page["data"] and early:
                # An empty page that came back early: a server that does not long-poll.
                await asyncio.sleep(EMPTY_POLL_PAUSE_S)
            for item in page["data"]:
                event = JobEvent(
                    id=str(item["id"]),
                    type=str(item["type"]),
                    data=item.get("data") or {},
                    created_at=item.get("created_at"),
                )
                cursor = event.id
                yield event
                if event.type == wire.TRAINING_FAILED:
                    raise TrainingJobFailed(
                        job_id,
                        str(
                            event.data.get("error_message")
                            or event.data.get("message")
                            or "no message"
                        ),
                        str(event.data.get("type") or ""),
                    )
                if event.type == wire.TRAINING_ENDED:
                    return

    # --- HTTP ---------------------------------------------------------------------------

    def _model_id(self, run: RunRef) -> str:
        model_id = self._model_ids.get(run)
        if model_id is None:
            raise NotRegisteredError(
                f"model {run} is not registered with this ServerlessBackend; call "
                "`await model.register(backend)` first"
            )
        return model_id

    async def _checkpoint_page(self, run: RunRef, params: Mapping[str, str]) -> dict[str, Any]:
        path = f"{wire.MODELS_PATH}/{self._model_id(run)}/checkpoints"
        payload: dict[str, Any] = (await self._request("GET", path, params=dict(params))).json()
        return payload

    async def _request(
        self, method: str, path: str, *, extra_timeout: float = 0.0, **kwargs: Any
    ) -> httpx.Response:
        return await self._http.request(method, path, extra_timeout=extra_timeout, **kwargs)


def _group_json(group: TrajectoryGroup) -> dict[str, Any]:
    """A group as the hosted API takes it: its empty fields left out, as ART's client does."""
    dumped = group.model_dump(mode="json")
    return {key: value for key, value in dumped.items() if value or key == "trajectories"}


def experimental_config(config: TrainConfig) -> dict[str, Any]:
    """A TrainConfig as the hosted API's `experimental_config`: every option ART's client
    sends, by ART's names, and arthex's own fields where they are not at their defaults."""
    options: dict[str, Any] = dict(_FIXED_OPTIONS)
    for name in _SHARED_FIELDS:
        options[name] = getattr(config, name)
    options["normalize_advantages"] = config.scale_rewards
    options["ppo"] = config.loss_fn == "ppo"
    defaults = TrainConfig()
    for field in attrs.fields(TrainConfig):
        value = getattr(config, field.name)
        if field.name not in options and value != getattr(defaults, field.name):
            options[field.name] = value
    assert set(options) >= wire.TRAIN_OPTIONS
    return dict(sorted(options.items()))


def _offered(names: list[str]) -> BackendCapabilities:
    """The server backend's capabilities this client can use: all of them (an export fetches
    the step's checkpoint files from the server and exports them here) but serving a named
    checkpoint (the server's API has no call for it), and one trainer per run: the server
    keeps it across processes, the models' run leases within this one."""
    offered = set(names) - {str(Capability.SERVE_CHECKPOINT)}
    return BackendCapabilities(offered | {str(Capability.ONE_TRAINER)})


async def _heartbeat(backend: weakref.ref[ServerlessBackend], run: RunRef, ttl_s: float) -> None:
    """Renew the model's lease every third of its TTL while its backend lives (a long rollout
    phase makes no other call); the backend is held weakly, so one dropped without `close`
    is collected and its beat ends. Transport errors are retried on the next beat; a lease
    another trainer took ends the beat (the next training call says so)."""
    while True:
        await asyncio.sleep(ttl_s / 3)
        renewing = backend()
        if renewing is None:
            return
        try:
            await renewing._renew(run)
        except RunBusyError as exc:
            logger.warning("the lease on %s was lost: %s", run, exc)
            return
        except ArthexError as exc:  # unreachable or refused now: try again next beat
            logger.warning("could not renew the lease on %s: %s", run, exc)
        del renewing


# The lease id of this process on each (server, key); a forked child makes its own.
_LEASE_IDS: dict[tuple[int, str, str], str] = {}
# The backends not closed yet: `close` leaves a lease another of them still uses.
_OPEN: weakref.WeakSet[ServerlessBackend] = weakref.WeakSet()


def _process_lease_id(base_url: str, api_key: str) -> str:
    return _LEASE_IDS.setdefault((os.getpid(), base_url, api_key), secrets.token_urlsafe(24))


if TYPE_CHECKING:
    _fits: type[TrainingBackend] = ServerlessBackend
    _fine_tunes: type[SupervisedFineTuning] = ServerlessBackend
