"""The outermost ASGI layer: the two operator routes, and a record of every other request.

- `GET /healthz` needs no key and says only `{"status": "ok"}`: no version, no backend, no
  counts, nothing a stranger could learn from. It is not rate limited and not audited (a
  load balancer asks every few seconds), but it is counted in the metrics.
- `GET /metrics` needs an admin key (`--admin-keys`, never a tenant's key) and answers the
  Prometheus text format (metrics.py). Without admin keys it is closed (401).
- Every other request goes through the Guard to the routes; when it ends, its method, route
  template and status are counted, and a line goes to the audit log (audit.py) with the
  tenant and the model and job ids the handler noted.

The route template is found by matching the path against the API's routes here, before the
Guard runs, so a refused request (401, 413, 429) is filed under its route too.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from typing import Any

from ...adapters.inference.asgi import ASGIApp, Message, Receive, Scope, Send
from ...adapters.serverless.wire import INVALID_REQUEST, error_body
from .audit import AuditLog
from .guard import AUDIT_SCOPE_KEY, TENANT_SCOPE_KEY, identify, send_json, send_unauthorized
from .keys import KeyRing
from .metrics import ServerMetrics

__all__ = ["HEALTH_PATH", "METRICS_PATH", "Observer"]

HEALTH_PATH = "/healthz"
METRICS_PATH = "/metrics"
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
CLIENT_GONE = 499  # no answer was sent: the client left first (nginx's convention)


class Observer:
    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: Sequence[str],
        metrics: ServerMetrics,
        audit: AuditLog | None,
        admin_keys: KeyRing | None,
    ) -> None:
        from starlette.routing import compile_path

        self.app = app
        self.metrics = metrics
        self.audit = audit
        self.admin_keys = admin_keys
        self._routes: list[tuple[re.Pattern[str], str]] = [
            (compile_path(path)[0], path) for path in dict.fromkeys(routes)
        ]

    def route_of(self, path: str) -> str:
        for pattern, template in self._routes:
            if pattern.match(path):
                return template
        return "unmatched"

    def header_refused(self) -> None:
        """A request head too large to read (431 from the protocol, before any app)."""
        self.metrics.count("-", "-", 431)
        if self.audit is not None:
            self.audit.record(tenant=None, method="-", route=None, status=431, duration_ms=0.0)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = str(scope.get("method", "GET"))
        method = method if method in KNOWN_METHODS else "other"
        path = str(scope.get("path", ""))
        if path == HEALTH_PATH:
            status = await self._health(method, send)
            self.metrics.count(method, HEALTH_PATH, status)
            return
        started = time.monotonic()
        status = CLIENT_GONE

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        route: str | None = METRICS_PATH
        try:
            if path == METRICS_PATH:
                await self._metrics(scope, method, observed)
            else:
                route = self.route_of(path)
                await self.app(scope, receive, observed)
        except Exception:
            status = 500
            raise
        finally:
            self.metrics.count(method, route or "unmatched", status)
            if self.audit is not None:
                ids: dict[str, Any] = scope.get(AUDIT_SCOPE_KEY) or {}
                self.audit.record(
                    tenant=scope.get(TENANT_SCOPE_KEY),
                    method=method,
                    route=route if route != "unmatched" else None,
                    status=status,
                    duration_ms=(time.monotonic() - started) * 1000,
                    model_id=ids.get("model_id"),
                    job_id=ids.get("job_id"),
                )

    async def _health(self, method: str, send: Send) -> int:
        if method not in ("GET", "HEAD"):
            await send_json(send, 405, error_body(405, "GET /healthz", INVALID_REQUEST))
            return 405
        await send_json(send, 200, {"status": "ok"})
        return 200

    async def _metrics(self, scope: Scope, method: str, send: Send) -> None:
        found = identify(scope, self.admin_keys)
        if found is None:
            await send_unauthorized(send, "admin key", "<admin key>")
            return
        scope[TENANT_SCOPE_KEY] = f"admin:{found[0]}"
        if method != "GET":
            await send_json(send, 405, error_body(405, "GET /metrics", INVALID_REQUEST))
            return
        # Measuring the tenants' folders walks the disk: off the event loop.
        text, content_type = await asyncio.to_thread(self.metrics.render)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", content_type.encode()),
                    (b"content-length", str(len(text)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": text})
