"""The training server's ASGI app: routes over a TrainingService, behind the Guard.

Routes are plain Starlette routes on a FastAPI app: handlers take the request and read path
parameters from it, since FastAPI's injection would resolve annotations against this
module's globals, where the lazily imported framework types are not. See server.py for the
list of routes and statuses.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ...core.errors import (
    ArthexError,
    InvalidInputError,
    MissingExtraError,
    NotRegisteredError,
    UnsupportedCapability,
)
from ...core.identity import validate_name
from ...ports.training_backend import TrainingBackend
from . import _wire as wire
from . import proxy
from .errors import ModelBusyError
from .guard import TENANT_SCOPE_KEY, ASGIApp, Guard
from .jobs import DEFAULT_RETENTION_S, JobLog
from .keys import KeyRing
from .registry import ModelRecord
from .service import TrainingService
from .sft_jobs import add_sft_route

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    Handler = Callable[[Request], Awaitable[Response | dict[str, Any]]]

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app"]

logger = logging.getLogger("arthex.serverless")

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_WAIT_S = 30.0
MAX_EVENTS_PER_PAGE = 1000


def create_app(
    backend: TrainingBackend,
    *,
    keys: KeyRing,
    state_dir: str | Path,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    allowed_base_models: Collection[str] | None = None,
    job_retention_s: float = DEFAULT_RETENTION_S,
) -> ASGIApp:
    """The ASGI app. Its lifespan opens the state (registry, jobs) and, at shutdown, ends
    running jobs and closes the backend."""
    try:
        import httpx
        from fastapi import FastAPI
        from fastapi.exceptions import RequestValidationError
        from starlette.exceptions import HTTPException
        from starlette.responses import JSONResponse, Response, StreamingResponse
    except ImportError as exc:
        raise MissingExtraError(exc.name or "fastapi", "server") from exc

    service = TrainingService(
        backend,
        state_dir,
        allowed_base_models=allowed_base_models,
        job_retention_s=job_retention_s,
    )
    clients: list[httpx.AsyncClient] = []

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        service.open()
        clients.append(httpx.AsyncClient(timeout=proxy.UPSTREAM_TIMEOUT_S))
        try:
            yield
        finally:
            await clients.pop().aclose()
            await service.close()

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

    def fail(status: int, message: str, kind: str, param: str | None = None) -> JSONResponse:
        return JSONResponse(wire.error_body(status, message, kind, param), status_code=status)

    @app.exception_handler(ArthexError)
    async def arthex_error(_request: Request, exc: ArthexError) -> JSONResponse:
        if isinstance(exc, ModelBusyError):
            return fail(409, str(exc), wire.MODEL_BUSY)
        if isinstance(exc, NotRegisteredError):
            return fail(404, str(exc), wire.NOT_FOUND)
        if isinstance(exc, UnsupportedCapability):
            return fail(501, str(exc), wire.UNSUPPORTED_CAPABILITY, exc.capability)
        if isinstance(exc, InvalidInputError):
            return fail(422, str(exc), wire.INVALID_REQUEST)
        logger.error("request failed: %s", exc)
        return fail(500, service.scrub(str(exc)), wire.INTERNAL_ERROR)

    @app.exception_handler(HTTPException)
    async def http_error(_request: Request, exc: HTTPException) -> JSONResponse:
        kind = wire.NOT_FOUND if exc.status_code == 404 else wire.INVALID_REQUEST
        return fail(exc.status_code, str(exc.detail), kind)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return fail(422, str(exc), wire.INVALID_REQUEST)

    @app.exception_handler(Exception)
    async def unexpected(_request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error")
        return fail(500, service.scrub(f"{type(exc).__name__}: {exc}"), wire.INTERNAL_ERROR)

    def route(path: str, method: str) -> Callable[[Handler], Handler]:
        """Plain Starlette routes: the handlers take the request and read path parameters
        from it (FastAPI's injection would resolve annotations against module globals)."""

        def add(handler: Handler) -> Handler:
            async def endpoint(request: Request) -> Response:
                result = await handler(request)
                return result if isinstance(result, Response) else JSONResponse(result)

            app.add_route(path, endpoint, methods=[method])
            return handler

        return add

    def tenant(request: Request) -> str:
        return str(request.scope[TENANT_SCOPE_KEY])

    async def json_body(request: Request) -> dict[str, Any]:
        raw = await request.body()
        try:
            payload = json.loads(raw or b"null")
        except ValueError as exc:
            raise _BadJson(f"the request body is not JSON: {exc}") from None
        if not isinstance(payload, dict):
            raise _BadJson("the request body must be a JSON object")
        return payload

    @app.exception_handler(_BadJson)
    async def bad_json(_request: Request, exc: _BadJson) -> JSONResponse:
        return fail(400, str(exc), wire.INVALID_REQUEST)

    def model_of(request: Request) -> ModelRecord:
        model_id = str(request.path_params["model_id"])
        if wire.MODEL_ID.fullmatch(model_id) is None:
            raise NotRegisteredError(f"no model {model_id!r:.80} is registered for this API key")
        return service.model(tenant(request), model_id)

    def job_of(request: Request) -> JobLog:
        job_id = str(request.path_params["job_id"])
        job = (
            service.jobs.get(tenant(request), job_id)
            if wire.JOB_ID.fullmatch(job_id) is not None
            else None
        )
        if job is None:
            raise NotRegisteredError(f"no training job {job_id!r:.80} exists for this API key")
        return job

    # --- backend and models ---------------------------------------------------------------

    @route(wire.BACKEND_PATH, "GET")
    async def backend_info(request: Request) -> dict[str, Any]:
        return {"backend": type(backend).__name__, "capabilities": service.capabilities()}

    @route(wire.MODELS_PATH, "POST")
    async def register(request: Request) -> Response:
        body = await json_body(request)
        record, created = await service.register(
            tenant(request),
            body.get("project"),
            body.get("name"),
            body.get("base_model"),
            body.get("config"),
        )
        payload = {
            **record.public(),
            "inference": service.endpoint_of(record) is not None,
            "capabilities": service.capabilities(),
        }
        return JSONResponse(payload, status_code=201 if created else 200)

    @route(wire.MODELS_PATH, "GET")
    async def list_models(request: Request) -> dict[str, Any]:
        records = service.registry.of_tenant(tenant(request))
        return {"object": "list", "data": [r.public() for r in records], "has_more": False}

    @route(wire.MODELS_PATH + "/{model_id}", "GET")
    async def get_model(request: Request) -> dict[str, Any]:
        return model_of(request).public()

    @route(wire.MODELS_PATH + "/{model_id}/checkpoints", "GET")
    async def checkpoints(request: Request) -> dict[str, Any]:
        steps, latest = await service.checkpoints(model_of(request))
        data = [{"object": "checkpoint", "step": step} for step in steps]
        return {"object": "list", "data": data, "has_more": False, "step": latest}

    @route(wire.MODELS_PATH + "/{model_id}/checkpoints", "DELETE")
    async def delete_checkpoints(request: Request) -> dict[str, Any]:
        record = model_of(request)
        steps = (await json_body(request)).get("steps")
        if not isinstance(steps, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps
        ):
            raise InvalidInputError("'steps' must be a list of checkpoint steps (integers >= 0)")
        return await service.delete_checkpoints(record, steps)

    # --- training jobs --------------------------------------------------------------------

    @route(wire.JOBS_PATH, "POST")
    async def create_job(request: Request) -> Response:
        body = await json_body(request)
        job = await service.start_job(
            tenant(request), body.get("model_id"), body.get("trajectory_groups"), body.get("config")
        )
        return JSONResponse(job.public(), status_code=201)

    @route(wire.JOBS_PATH + "/{job_id}", "GET")
    async def get_job(request: Request) -> dict[str, Any]:
        return job_of(request).public()

    @route(wire.JOBS_PATH + "/{job_id}/events", "GET")
    async def events(request: Request) -> Response | dict[str, Any]:
        job = job_of(request)
        query = request.query_params
        after = _int_param(
            request.headers.get("last-event-id") or query.get("after"), "after", 0, 0, None
        )
        limit = _int_param(query.get("limit"), "limit", 100, 1, MAX_EVENTS_PER_PAGE)
        wait = _float_param(query.get("wait"), "wait", 0.0, 0.0, MAX_WAIT_S)
        if query.get("stream", "").lower() in ("1", "true", "yes"):
            return StreamingResponse(_sse(job, after), media_type="text/event-stream")
        if wait > 0:
            await job.wait(after, wait)
        data, has_more = job.after(after, limit)
        if any(event["type"] in wire.TERMINAL_EVENTS for event in data):
            job.mark_read()
        return {"object": "list", "data": data, "has_more": has_more, "status": job.status}

    add_sft_route(route, service, json_body, tenant)

    # --- inference proxy ------------------------------------------------------------------

    def project_of(request: Request) -> str | None:
        project = request.path_params.get("project")
        if project is None:
            return None
        try:
            return validate_name(project, "project")
        except InvalidInputError:
            raise NotRegisteredError(f"no project {project!r:.80} for this API key") from None

    async def models_v1(request: Request) -> dict[str, Any]:
        return await proxy.list_models(service, clients[0], tenant(request), project_of(request))

    async def chat_v1(request: Request) -> Response:
        raw = await request.body()
        project = project_of(request)
        return await proxy.chat_completions(service, clients[0], tenant(request), raw, project)

    for prefix in ("/v1", "/v1/projects/{project}"):
        route(prefix + "/models", "GET")(models_v1)
        route(prefix + "/chat/completions", "POST")(chat_v1)

    return Guard(cast(ASGIApp, app), keys=keys, max_body_bytes=max_body_bytes)


class _BadJson(Exception):
    pass


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


def _int_param(raw: str | None, name: str, default: int, low: int, high: int | None) -> int:
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or int(raw) < low or (high is not None and int(raw) > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise InvalidInputError(f"query parameter {name!r} must be an integer {bound}, got {raw!r}")
    return int(raw)


def _float_param(raw: str | None, name: str, default: float, low: float, high: float) -> float:
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:
        raise InvalidInputError(
            f"query parameter {name!r} must be a number between {low} and {high}, got {raw!r}"
        )
    return value
