"""The ASGI app of `arthex serve --protocol tinker`: the TinkerService behind the server's
Guard (the key in `X-API-Key`, the rate, the body cap) and Observer (health, metrics, audit).

    Observer  ->  signed downloads (GET /files/...: their signature is their key)
              ->  Guard  ->  the service, on a thread

The service's calls block (a `retrieve_future` long-polls, a save writes files), so each
runs on a thread of a pool of its own, never on the event loop. The tenant the Guard found
for the key goes with every call: the service answers another tenant's ids as missing ones.
Errors are `{"detail": message}` with the status the service chose; a quota refusal is a
403 (with `x-should-retry: false`), since the SDK retries a 429 or a 5xx for minutes and
waiting cures no quota. An unexpected exception is a 500 whose message is scrubbed of the
state path.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ....adapters.inference.asgi import ASGIApp, Receive, Scope, Send, header
from ....adapters.serverless.errors import QuotaExceededError
from ..audit import AuditLog
from ..bodies import spooled
from ..guard import AUDIT_SCOPE_KEY, OPEN_TENANT, TENANT_SCOPE_KEY, Guard, KeyCheck
from ..keys import KeyRing
from ..limits import ServerLimits
from ..metrics import ServerMetrics
from ..observer import Observer
from .errors import FILES_PREFIX, HttpError
from .service import TinkerService
from .wire import Reply

__all__ = ["KEY_HINT", "ROUTES", "create_tinker_app", "tinker_error", "x_api_key"]

logger = logging.getLogger("arthex.tinker_protocol")

KEY_HINT = "X-API-Key: tml-<key>"  # what the tinker SDK sends (TINKER_API_KEY)
# A quota refusal: the SDK retries every 429 and 5xx for minutes whatever the server says,
# and waiting frees no quota, so it is a 403 (the SDK's PermissionDeniedError, at once).
QUOTA_STATUS = 403
REQUEST_THREADS = 64  # blocking calls at once: mostly long polls, waiting on a promise

# The route templates (audit log and metrics labels; the service does the routing).
_POSTS = (
    "client/config",
    "client/dynamic_config",
    "create_session",
    "session_heartbeat",
    "telemetry",
    "create_model",
    "get_info",
    "forward_backward",
    "optim_step",
    "save_weights",
    "save_weights_for_sampler",
    "save_weights_external",
    "load_weights",
    "create_sampling_session",
    "asample",
    "retrieve_future",
    "cancel_future",
    "sessions/{session_id}/finish",
)
_GETS = (
    "healthz",
    "get_server_capabilities",
    "training_runs",
    "checkpoints",
    "samplers/{sampler_id}",
    "training_runs/{run_id}",
    "training_runs/{run_id}/checkpoints",
    "training_runs/{run_id}/checkpoints/external_weights/{name}/external_weights_urls",
)
_CHECKPOINT = "training_runs/{run_id}/checkpoints/{kind}/{name}"
ROUTES = [
    *(f"/api/v1/{route}" for route in dict.fromkeys(_POSTS + _GETS)),
    f"/api/v1/{_CHECKPOINT}",
    f"/api/v1/{_CHECKPOINT}/ttl",
    FILES_PREFIX + "{path:path}",
]


def tinker_error(status: int, message: str, _kind: str = "") -> dict[str, Any]:
    """The service's error body (FastAPI's HTTPException shape, which the SDK reads)."""
    return {"detail": message}


def x_api_key(scope: Scope) -> str | None:
    """The key where the tinker SDK sends it."""
    value = header(scope, b"x-api-key")
    return value.strip() or None if value is not None else None


class _Service:
    """The innermost app: one request to the service, on the pool."""

    def __init__(
        self, service: TinkerService, audit: AuditLog | None, scrub: Callable[[str], str]
    ) -> None:
        self.service = service
        self.audit = audit
        self.scrub = scrub
        self.pool = ThreadPoolExecutor(REQUEST_THREADS, thread_name_prefix="tinker-request")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        body = spooled(scope)
        target = scope.get("raw_path") or str(scope["path"]).encode()
        if scope.get("query_string"):
            target += b"?" + scope["query_string"]
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers", ())
        }
        tenant = str(scope.get(TENANT_SCOPE_KEY) or OPEN_TENANT)
        loop = asyncio.get_running_loop()
        extra: list[tuple[bytes, bytes]] = []
        try:
            if self.service.closed:
                raise HttpError(503, "the server is stopping")
            method, raw = str(scope["method"]), target.decode("latin-1")
            reply = await loop.run_in_executor(
                self.pool,
                lambda: self.service.handle(
                    method, raw, headers, body.read() if body is not None else b"", tenant
                ),
            )
        except HttpError as exc:
            reply = Reply.json(tinker_error(exc.status, str(exc)), exc.status)
        except QuotaExceededError as exc:
            reply = Reply.json(tinker_error(QUOTA_STATUS, str(exc)), QUOTA_STATUS)
            extra.append((b"x-should-retry", b"false"))
        except Exception as exc:
            logger.exception("%s %s failed", scope["method"], scope["path"])
            message = self.scrub(f"{type(exc).__name__}: {exc}")
            reply = Reply.json(tinker_error(500, message), 500)
        scope[AUDIT_SCOPE_KEY] = _audited(reply)
        await send(
            {
                "type": "http.response.start",
                "status": reply.status,
                "headers": [
                    (b"content-type", reply.content_type.encode()),
                    (b"content-length", str(len(reply.body)).encode()),
                    *extra,
                ],
            }
        )
        await send({"type": "http.response.body", "body": reply.body})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if self.audit is not None:
                    self.audit.open()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                # on the loop, which serves nothing now: at interpreter exit (an emulator
                # stopped by its exit hook) no new thread may start
                self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def close(self) -> None:
        """Fail what is pending (long polls return), then end the request threads."""
        self.service.close()
        self.pool.shutdown(wait=True, cancel_futures=True)
        if self.audit is not None:
            self.audit.close()


def _audited(reply: Reply) -> dict[str, Any]:
    """The ids the audit log records: the run (`model_id`) and the promise (as `job_id`)."""
    if reply.content_type != "application/json" or len(reply.body) > 4096:
        return {}
    try:
        data = json.loads(reply.body)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    ids = {"model_id": data.get("model_id"), "job_id": data.get("request_id")}
    return {key: value for key, value in ids.items() if isinstance(value, str)}


class _SignedDownloads:
    """GET /files/... goes past the Guard: a signed URL carries no API key (the SDK hands it
    to a plain HTTP client); the service checks its signature and expiry."""

    def __init__(self, guarded: ASGIApp, service: ASGIApp) -> None:
        self.guarded = guarded
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope.get("method") == "GET"
            and str(scope.get("path", "")).startswith(FILES_PREFIX)
        ):
            await self.service(scope, receive, send)
            return
        await self.guarded(scope, receive, send)


def create_tinker_app(
    service: TinkerService,
    *,
    keys: KeyCheck | None,
    limits: ServerLimits,
    audit: AuditLog | None = None,
    admin_keys: KeyRing | None = None,
    state_dir: str | Path | None = None,
) -> Observer:
    """The ASGI app over `service` (which it closes at shutdown). `keys` None serves one
    open tenant (loopback tests); `admin_keys` open /metrics."""
    paths = [str(Path(state_dir).resolve()), str(state_dir)] if state_dir is not None else []

    def scrub(text: str) -> str:
        for path in paths:
            text = text.replace(path, "<state>")
        return text

    inner = _Service(service, audit, scrub)
    metrics = ServerMetrics(
        jobs_running=lambda: 0,
        jobs_queued=lambda: 0,
        bytes_by_tenant=(
            service.quotas.bytes_by_tenant if service.quotas is not None else lambda: {}
        ),
    )
    guard = Guard(
        inner,
        keys=keys,
        limits=limits,
        spool_dir=lambda: None,
        on_rate_limited=metrics.rate_limited.inc,
        error_shape=tinker_error,
        credential=x_api_key,
        key_hint=KEY_HINT,
    )
    return Observer(
        _SignedDownloads(guard, inner),
        routes=ROUTES,
        metrics=metrics,
        audit=audit,
        admin_keys=admin_keys,
    )
