"""The training server's route handlers, one method per route, over a TrainingService.

Handlers take the Starlette request and read path parameters and the spooled body from it
(FastAPI's injection would resolve annotations against module globals, where the lazily
imported framework types are not). They return a dict (sent as JSON, 200) or a Response.
`routes()` is the table app.py mounts; server.py lists the routes and their statuses.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ...adapters.serverless import wire
from ...core.errors import InvalidInputError, NotRegisteredError
from ...core.identity import validate_name
from . import proxy
from .bodies import json_object
from .guard import AUDIT_SCOPE_KEY, TENANT_SCOPE_KEY
from .jobs import JobLog
from .leases import HOLDER_HEADER, LEASE_HEADER, Lease, parse_claim
from .model_admin import delete_model, log_groups
from .registry import ModelRecord
from .service import TrainingService
from .sft_jobs import start_sft_job

if TYPE_CHECKING:
    import httpx
    from starlette.requests import Request
    from starlette.responses import Response

    Handler = Callable[[Request], Awaitable["Response | dict[str, Any]"]]

__all__ = ["Handlers"]

MAX_WAIT_S = 30.0
MAX_EVENTS_PER_PAGE = 1000
_DECIMAL = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9})?")


class Handlers:
    """Every route of the API; `http` gives the proxy's upstream client (made in the
    app's lifespan)."""

    def __init__(self, service: TrainingService, http: Callable[[], httpx.AsyncClient]) -> None:
        self.service = service
        self.http = http

    def routes(self) -> list[tuple[str, str, Handler]]:
        table: list[tuple[str, str, Handler]] = []
        # The API is under /v1 (the base URL ART's client is given ends there); the same
        # routes at the root serve arthex clients of before.
        for root in (wire.API_PREFIX, ""):
            models, jobs = root + wire.MODELS_PATH, root + wire.JOBS_PATH
            table += [
                ("GET", root + wire.BACKEND_PATH, self.backend_info),
                ("POST", models, self.register),
                ("GET", models, self.list_models),
                ("GET", models + "/{model_id}", self.get_model),
                ("DELETE", models + "/{model_id}", self.delete_model),
                ("POST", models + "/{model_id}/log", self.log),
                ("PUT", models + "/{model_id}/lease", self.renew_lease),
                ("DELETE", models + "/{model_id}/lease", self.release_lease),
                ("GET", models + "/{model_id}/checkpoints", self.checkpoints),
                ("DELETE", models + "/{model_id}/checkpoints", self.delete_checkpoints),
                ("GET", models + "/{model_id}/checkpoints/{step}/files", self.checkpoint_files),
                ("POST", jobs, self.create_job),
                ("POST", root + wire.SFT_JOBS_PATH, self.create_sft_job),
                ("GET", jobs + "/{job_id}", self.get_job),
                ("GET", jobs + "/{job_id}/events", self.events),
            ]
        for prefix in ("/v1", "/v1/projects/{project}"):
            table.append(("GET", prefix + "/models", self.models_v1))
            table.append(("POST", prefix + "/chat/completions", self.chat_v1))
        return table

    # --- lookups --------------------------------------------------------------------------

    @staticmethod
    def tenant(request: Request) -> str:
        return str(request.scope[TENANT_SCOPE_KEY])

    @staticmethod
    def audit(request: Request, **ids: str) -> None:
        request.scope.setdefault(AUDIT_SCOPE_KEY, {}).update(ids)

    @staticmethod
    def lease_of(request: Request) -> str | None:
        return request.headers.get(LEASE_HEADER) or None

    def model_of(self, request: Request) -> ModelRecord:
        """The tenant's model named in the path; a read by its trainer renews the lease."""
        model_id = str(request.path_params["model_id"])
        if wire.MODEL_ID.fullmatch(model_id) is None:
            raise NotRegisteredError(f"no model {model_id!r:.80} is registered for this API key")
        record = self.service.model(self.tenant(request), model_id)
        self.audit(request, model_id=record.id)
        self.service.leases.renew(record.id, self.lease_of(request))
        return record

    def job_of(self, request: Request) -> JobLog:
        job_id = str(request.path_params["job_id"])
        job = (
            self.service.jobs.get(self.tenant(request), job_id)
            if wire.JOB_ID.fullmatch(job_id) is not None
            else None
        )
        if job is None:
            raise NotRegisteredError(f"no training job {job_id!r:.80} exists for this API key")
        self.audit(request, model_id=job.model_id, job_id=job.id)
        self.service.leases.renew(job.model_id, self.lease_of(request))
        return job

    def project_of(self, request: Request) -> str | None:
        project = request.path_params.get("project")
        if project is None:
            return None
        try:
            return validate_name(project, "project")
        except InvalidInputError:
            raise NotRegisteredError(f"no project {project!r:.80} for this API key") from None

    # --- backend and models ---------------------------------------------------------------

    async def backend_info(self, request: Request) -> dict[str, Any]:
        return {
            "backend": type(self.service.backend).__name__,
            "capabilities": self.service.capabilities(),
        }

    async def register(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        body = json_object(request.scope)
        tenant = self.tenant(request)
        entity = body.get("entity")
        if entity is not None and entity != tenant:
            raise NotRegisteredError(
                f"entity {entity!r:.80} is not this API key's; leave it unset or give {tenant!r}"
            )
        record, created, lease = await self.service.register(
            tenant,
            body.get("project"),
            body.get("name"),
            body.get("base_model"),
            body.get("config"),
            self._claim_of(request, body.get("lease")),
        )
        self.audit(request, model_id=record.id)
        if not created and body.get("return_existing") is False:
            raise InvalidInputError(
                f"model {record.label} is registered already; pass return_existing=true to "
                "use it, or register another name"
            )
        payload = {
            **record.public(),
            "inference": self.service.endpoint_of(record) is not None,
            "capabilities": self.service.capabilities(),
            "lease": self._lease_json(lease),
        }
        return JSONResponse(payload, status_code=201 if created else 200)

    def _claim_of(self, request: Request, in_body: object) -> object:
        """A register's lease claim: the body's "lease", else the lease and holder headers."""
        holder = request.headers.get(HOLDER_HEADER)
        lease_id = self.lease_of(request)
        if in_body is None and holder is not None and lease_id is not None:
            return {"id": lease_id, "holder": holder}
        return in_body

    def _lease_json(self, lease: Lease | None) -> dict[str, Any] | None:
        if lease is None:
            return None
        return {"id": lease.id, "since": lease.since, "ttl_s": self.service.leases.ttl_s}

    async def renew_lease(self, request: Request) -> dict[str, Any]:
        """The trainer's heartbeat: `{"id", "holder"}` takes or renews the model's lease."""
        record = self.model_of(request)
        claim = parse_claim(json_object(request.scope))
        assert claim is not None
        lease = self.service.leases.claim(record.id, claim[0], claim[1], record.label)
        return {"lease": self._lease_json(lease)}

    async def release_lease(self, request: Request) -> dict[str, Any]:
        """The trainer is done: the model is free for another (a no-op for a non-holder)."""
        record = self.model_of(request)
        released = self.service.leases.release(record.id, self.lease_of(request))
        return {"released": released}

    async def list_models(self, request: Request) -> dict[str, Any]:
        records = self.service.registry.of_tenant(self.tenant(request))
        return {"object": "list", "data": [r.public() for r in records], "has_more": False}

    async def get_model(self, request: Request) -> dict[str, Any]:
        return self.model_of(request).public()

    async def delete_model(self, request: Request) -> dict[str, Any]:
        return await delete_model(self.service, self.model_of(request), self.lease_of(request))

    async def log(self, request: Request) -> dict[str, Any]:
        record = self.model_of(request)
        return await log_groups(self.service, record, json_object(request.scope))

    async def checkpoints(self, request: Request) -> dict[str, Any]:
        """A cursor page of the model's checkpoints (`order` asc or desc by step, `limit`,
        `after` a checkpoint id), and `step`, the latest."""
        record = self.model_of(request)
        steps, latest = await self.service.checkpoints(record)
        query = request.query_params
        order = query.get("order") or "asc"
        if order not in ("asc", "desc"):
            raise InvalidInputError(
                f"query parameter 'order' must be asc or desc, got {order!r:.20}"
            )
        limit = int_param(query.get("limit"), "limit", MAX_EVENTS_PER_PAGE, 1, MAX_EVENTS_PER_PAGE)
        ids = [wire.checkpoint_id(record.id, step) for step in steps]
        listed = list(zip(ids, steps, strict=True))
        if order == "desc":
            listed.reverse()
        after = query.get("after")
        if after:
            position = [item[0] for item in listed].index(after) if after in ids else None
            if position is None:
                raise InvalidInputError(f"'after' {after!r:.80} is no checkpoint of this model")
            listed = listed[position + 1 :]
        page = listed[:limit]
        data = [
            {"id": cid, "object": "checkpoint", "step": step, "metrics": {}} for cid, step in page
        ]
        return {"object": "list", "data": data, "has_more": len(listed) > limit, "step": latest}

    async def checkpoint_files(self, request: Request) -> Response:
        """The files of one checkpoint, as a tar: what a client needs to export the step."""
        from starlette.background import BackgroundTask
        from starlette.responses import FileResponse

        record = self.model_of(request)
        step = wire.parse_count(str(request.path_params["step"]))
        if step is None:
            raise InvalidInputError("the checkpoint step in the path must be an integer >= 0")
        archive = await self.service.checkpoint_archive(record, step)
        return FileResponse(
            archive,
            media_type="application/x-tar",
            background=BackgroundTask(archive.unlink, missing_ok=True),
        )

    async def delete_checkpoints(self, request: Request) -> dict[str, Any]:
        record = self.model_of(request)
        steps = json_object(request.scope).get("steps")
        if not isinstance(steps, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps
        ):
            raise InvalidInputError("'steps' must be a list of checkpoint steps (integers >= 0)")
        return await self.service.delete_checkpoints(record, steps, self.lease_of(request))

    # --- training jobs --------------------------------------------------------------------

    async def create_job(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        body = json_object(request.scope)
        job = await self.service.start_job(
            self.tenant(request),
            body.get("model_id"),
            body.get("trajectory_groups"),
            body.get("config"),
            self.lease_of(request),
            experimental=body.get("experimental_config"),
        )
        self.audit(request, model_id=job.model_id, job_id=job.id)
        return JSONResponse(job.public(), status_code=201)

    async def create_sft_job(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        body = json_object(request.scope)
        if body.get("conversations") is None and body.get("training_data_url") is not None:
            raise InvalidInputError(
                "this server reads no training_data_url (a W&B artifact needs the hosted "
                "service): send the records as 'conversations' (arthex's ServerlessBackend "
                "does), or fine-tune through arthex's client"
            )
        job = await start_sft_job(
            self.service,
            self.tenant(request),
            body.get("model_id"),
            body.get("conversations"),
            body.get("config"),
            self.lease_of(request),
        )
        self.audit(request, model_id=job.model_id, job_id=job.id)
        return JSONResponse(job.public(), status_code=201)

    async def get_job(self, request: Request) -> dict[str, Any]:
        return self.job_of(request).public()

    async def events(self, request: Request) -> Response | dict[str, Any]:
        from starlette.responses import StreamingResponse

        job = self.job_of(request)
        query = request.query_params
        cursor = request.headers.get("last-event-id") or query.get("after")
        after = int_param(cursor, "after", 0, 0, None)
        limit = int_param(query.get("limit"), "limit", 100, 1, MAX_EVENTS_PER_PAGE)
        wait = float_param(query.get("wait"), "wait", 0.0, 0.0, MAX_WAIT_S)
        if query.get("stream", "").lower() in ("1", "true", "yes"):
            return StreamingResponse(_sse(job, after), media_type="text/event-stream")
        if wait > 0:
            await job.wait(after, wait)
        data, has_more = job.after(after, limit)
        if any(event["type"] in wire.TERMINAL_EVENTS for event in data):
            job.mark_read()
        return {"object": "list", "data": data, "has_more": has_more, "status": job.status}

    # --- inference proxy ------------------------------------------------------------------

    async def models_v1(self, request: Request) -> dict[str, Any]:
        return await proxy.list_models(
            self.service, self.http(), self.tenant(request), self.project_of(request)
        )

    async def chat_v1(self, request: Request) -> Response:
        body = json_object(request.scope)
        project = self.project_of(request)
        return await proxy.chat_completions(
            self.service, self.http(), self.tenant(request), body, project
        )


async def _sse(job: JobLog, after: int) -> AsyncIterator[bytes]:
    """Server-sent events from `after` until the job's terminal event; `id:` is the cursor, so a
    reconnecting EventSource resumes with Last-Event-ID."""
    cursor = after
    while True:
        data, _ = job.after(cursor, MAX_EVENTS_PER_PAGE)
        for event in data:
            cursor = int(event["id"])
            yield (
                f"id: {event['id']}\nevent: {event['type']}\ndata: {json.dumps(event)}\n\n"
            ).encode()
            if event["type"] in wire.TERMINAL_EVENTS:
                job.mark_read()
                return
        if not data:
            await job.wait(cursor, 15.0)
            if len(job.events) <= cursor:
                yield b": keep-alive\n\n"


def int_param(raw: str | None, name: str, default: int, low: int, high: int | None) -> int:
    if raw is None or raw == "":
        return default
    value = wire.parse_count(raw)
    if value is None or value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise InvalidInputError(
            f"query parameter {name!r} must be an integer {bound} in ASCII digits, got {raw!r:.40}"
        )
    return value


def float_param(raw: str | None, name: str, default: float, low: float, high: float) -> float:
    if raw is None or raw == "":
        return default
    value = float(raw) if _DECIMAL.fullmatch(raw) is not None else float("nan")
    if not low <= value <= high:
        raise InvalidInputError(
            f"query parameter {name!r} must be a number between {low} and {high} in ASCII "
            f"digits, got {raw!r:.40}"
        )
    return value
