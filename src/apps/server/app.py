"""The training server's ASGI app: the routes of handlers.py over a TrainingService, behind
the Guard (key, rate, body), behind the Observer (health, metrics, audit).

Routes are plain Starlette routes on a FastAPI app (no OpenAPI pages, no injection). Every
error becomes a JSON body in OpenAI's shape with a 4xx status, or a 500 whose message is
scrubbed of the server's paths: an unexpected exception is a bug, and nothing a client sends
should reach one.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ...adapters.serverless import wire
from ...adapters.serverless.errors import http_answer
from ...core.errors import (
    ArthexError,
    DiskFullError,
    InvalidInputError,
    MissingExtraError,
)
from ...ports.training_backend import TrainingBackend
from . import proxy
from .audit import AuditLog
from .bodies import BadJsonError
from .guard import ASGIApp, Guard
from .handlers import Handlers
from .keys import KeyRing
from .limits import ServerLimits
from .metrics import ServerMetrics
from .observer import Observer
from .service import TrainingService

if TYPE_CHECKING:
    import httpx
    from fastapi import FastAPI
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

    from .handlers import Handler

    ErrorHandler = Callable[[Request, Exception], Awaitable[Response]]

__all__ = ["create_app"]

logger = logging.getLogger("arthex.serverless")


def create_app(
    backend: TrainingBackend,
    *,
    keys: KeyRing,
    state_dir: str | Path,
    limits: ServerLimits | None = None,
    allowed_base_models: Collection[str] | None = None,
    admin_keys: KeyRing | None = None,
    audit: AuditLog | None = None,
) -> Observer:
    """The ASGI app. Its lifespan opens the state (registry, jobs, leases, audit log) and, at
    shutdown, ends running jobs and closes the backend. `admin_keys` open /metrics; they must
    not be tenant keys."""
    if admin_keys is not None and admin_keys.overlaps(keys):
        raise InvalidInputError(
            "a key is both an admin key and a tenant key; give /metrics keys of its own"
        )
    try:
        import httpx
        from fastapi import FastAPI
    except ImportError as exc:
        raise MissingExtraError(exc.name or "fastapi", "server") from exc

    limits = limits if limits is not None else ServerLimits()
    service = TrainingService(
        backend, state_dir, allowed_base_models=allowed_base_models, limits=limits
    )
    clients: list[httpx.AsyncClient] = []

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        service.open()
        if audit is not None:
            audit.open()
        clients.append(httpx.AsyncClient(timeout=proxy.UPSTREAM_TIMEOUT_S))
        try:
            yield
        finally:
            await clients.pop().aclose()
            await service.close()
            if audit is not None:
                audit.close()

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    unexpected = _install_error_handlers(app, service)
    routes = Handlers(service, lambda: clients[0]).routes()
    for method, path, handler in routes:
        _mount(app, method, path, handler, unexpected)
    metrics = ServerMetrics(
        jobs_running=lambda: service.runner.running,
        jobs_queued=lambda: service.runner.queued,
        bytes_by_tenant=service.quotas.bytes_by_tenant,
    )
    guard = Guard(
        cast(ASGIApp, app),
        keys=keys,
        limits=limits,
        spool_dir=lambda: str(service.spool_dir) if service.spool_dir.is_dir() else None,
        on_rate_limited=metrics.rate_limited.inc,
    )
    return Observer(
        guard,
        routes=[path for _, path, _ in routes],
        metrics=metrics,
        audit=audit,
        admin_keys=admin_keys,
    )


def _mount(
    app: FastAPI, method: str, path: str, handler: Handler, unexpected: ErrorHandler
) -> None:
    """Mount a handler. An exception no handler maps is answered here (500, logged,
    scrubbed): left to Starlette's last-resort middleware it would be re-raised after the
    answer, and the server would drop the kept-alive connection with it."""
    from starlette.exceptions import HTTPException
    from starlette.responses import JSONResponse, Response

    async def endpoint(request: Request) -> Response:
        try:
            result = await handler(request)
        except (ArthexError, HTTPException):
            raise  # mapped by the exception handlers
        except Exception as exc:
            return await unexpected(request, exc)
        return result if isinstance(result, Response) else JSONResponse(result)

    app.add_route(path, endpoint, methods=[method])


def _install_error_handlers(app: FastAPI, service: TrainingService) -> ErrorHandler:
    """Map errors to statuses; anything unexpected is logged and scrubbed. Returns the
    handler of the unexpected."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException
    from starlette.responses import JSONResponse

    def fail(status: int, message: str, kind: str, param: str | None = None) -> JSONResponse:
        return JSONResponse(wire.error_body(status, message, kind, param), status_code=status)

    async def arthex_error(_request: Request, exc: Exception) -> Response:
        if isinstance(exc, BadJsonError):
            return fail(400, str(exc), wire.INVALID_REQUEST)
        if isinstance(exc, DiskFullError):  # the operator's to fix: the paths stay in the log
            logger.error("request failed: %s", exc)
            return fail(507, service.scrub(str(exc)), wire.STORAGE_EXCEEDED)
        answer = http_answer(exc)
        if answer is not None:
            status, kind, param = answer
            return fail(status, str(exc), kind, param)
        logger.error("request failed: %s", exc)
        return fail(500, service.scrub(str(exc)), wire.INTERNAL_ERROR)

    async def http_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = wire.NOT_FOUND if exc.status_code == 404 else wire.INVALID_REQUEST
        return fail(exc.status_code, str(exc.detail), kind)

    async def validation_error(_request: Request, exc: Exception) -> Response:
        return fail(422, str(exc), wire.INVALID_REQUEST)

    async def unexpected(_request: Request, exc: Exception) -> Response:
        logger.exception("unexpected error")
        return fail(500, service.scrub(f"{type(exc).__name__}: {exc}"), wire.INTERNAL_ERROR)

    app.add_exception_handler(ArthexError, arthex_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, unexpected)
    return unexpected
