"""The self-hosted training server: any TrainingBackend over HTTP, in the hosted API's shape.

    python -m arthex.apps.server --backend local --host 127.0.0.1 --port 8000 \
        --keys keys.txt --state-dir ./arthex-server

Routes (every one needs `Authorization: Bearer <key>`; a key is a tenant, see keys.py):

    GET    /preview/backend                        the backend's name and capabilities
    POST   /preview/models                         {project, name, base_model, config, lease}
    GET    /preview/models                         the tenant's models
    GET    /preview/models/{id}                    one model
    DELETE /preview/models/{id}                    the model, its checkpoints and logs
    POST   /preview/models/{id}/log                {model_id, trajectory_groups, split}
    PUT    /preview/models/{id}/lease              {id, holder}: take or renew the trainer lease
    DELETE /preview/models/{id}/lease              give the lease back (X-Arthex-Lease)
    GET    /preview/models/{id}/checkpoints        {data: [{step}], step: newest}
    DELETE /preview/models/{id}/checkpoints        {steps: [to delete]} (never the newest)
    POST   /preview/training-jobs                  {model_id, trajectory_groups, config} -> job
    POST   /preview/sft-training-jobs              {model_id, conversations, config} -> job
    GET    /preview/training-jobs/{id}             the job's status
    GET    /preview/training-jobs/{id}/events      ?after=<cursor>&limit=&wait=<s>&stream=true
    GET    /v1/models, POST /v1/chat/completions   OpenAI-compatible proxy to the backend
    GET    /v1/projects/{project}/models, POST /v1/projects/{project}/chat/completions

And two for operators: `GET /healthz` (no key; says only that the server lives) and
`GET /metrics` (an admin key from `--admin-keys`; Prometheus text format).

Statuses: 400 bad JSON, 401 bad key, 404 unknown (or another tenant's) model or job, 409 the
model is training (`model_busy`) or another client trains it (`run_busy`), 413 body too
large, 422 invalid input, 429 rate limit (with Retry-After) or a model/job quota, 431 request
head too large, 501 capability the backend lacks, 507 checkpoint storage quota. State under
`--state-dir`: `registry.json`, `server-secret`, `leases.json`, `audit.jsonl*`,
`jobs/{id}/events.jsonl`, `tmp/` (spooled bodies), `backend/` (checkpoints). Options:
options.py; limits and their defaults: limits.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sys
from collections.abc import Callable, Collection, Coroutine
from pathlib import Path
from typing import Any, ParamSpec

from ...core.errors import ArthexError, InvalidInputError, MissingExtraError, require_extra
from ...ports.training_backend import TrainingBackend
from . import options
from .app import create_app
from .audit import AuditLog
from .keys import KeyRing
from .limits import ServerLimits
from .options import DEFAULT_PORT
from .preload import backend_named
from .uvicorn_serving import serve_app, uvicorn_server

__all__ = ["create_app", "run", "serve", "serve_app", "serve_async", "uvicorn_server"]

logger = logging.getLogger("arthex.serverless")

P = ParamSpec("P")
TRACE = 5  # uvicorn's level below DEBUG


# --- running it ---------------------------------------------------------------------------


async def serve_async(
    backend: TrainingBackend,
    *,
    keys: KeyRing,
    state_dir: str | Path,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    limits: ServerLimits | None = None,
    allowed_base_models: Collection[str] | None = None,
    admin_keys: KeyRing | None = None,
    audit: AuditLog | None = None,
    on_ready: Callable[[str], None] | None = None,
    log_level: str = "warning",
) -> None:
    """Serve until SIGINT/SIGTERM (or cancellation); the backend is closed on the way out.
    `port=0` picks a free port; `on_ready` gets the base URL once the socket listens."""
    app = create_app(
        backend,
        keys=keys,
        state_dir=state_dir,
        limits=limits,
        allowed_base_models=allowed_base_models,
        admin_keys=admin_keys,
        audit=audit,
    )
    await serve_app(
        app, host=host, port=port, limits=limits, on_ready=on_ready, log_level=log_level
    )


def _blocking(
    serve_async: Callable[P, Coroutine[Any, Any, None]],
) -> Callable[P, None]:
    @functools.wraps(serve_async)
    def serve(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(serve_async(*args, **kwargs))

    serve.__name__ = serve.__qualname__ = "serve"
    serve.__doc__ = "Blocking form of `serve_async` (same arguments)."
    return serve


serve = _blocking(serve_async)


# what the `server` extra brings that serving imports first
SERVER_PACKAGES = ("fastapi", "uvicorn", "h11", "prometheus_client")


def run(opts: options.ServeOptions) -> None:
    """Serve as `opts` say, until SIGINT/SIGTERM: what `arthex serve` runs once its options
    are parsed and checked. A keys file or backend that cannot be loaded exits 1, one line."""
    logging.addLevelName(TRACE, "TRACE")
    level = TRACE if opts.log_level == "trace" else opts.log_level.upper()
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:  # before anything is read or started: one line
        require_extra("server", *SERVER_PACKAGES)
    except MissingExtraError as exc:
        sys.exit(f"arthex serve: {exc}")
    if opts.protocol == "art":
        from .art_protocol.main import run_art

        run_art(opts)
        return
    if opts.protocol == "tinker":
        from .tinker_protocol.main import run_tinker

        run_tinker(opts)
        return
    try:
        keys = KeyRing.load(opts.keys)
        admin_keys = options.admin_keys_of(opts)
        if admin_keys is not None and admin_keys.overlaps(keys):
            raise InvalidInputError("a key is both an admin key and a tenant key")
    except ArthexError as exc:
        sys.exit(f"arthex serve: {exc}")
    backend = backend_named(opts.backend)
    if opts.host not in ("127.0.0.1", "localhost", "::1"):
        logger.warning(
            "listening on %s: API keys travel in clear text; put a TLS proxy in front", opts.host
        )

    def ready(url: str) -> None:
        print(
            f"arthex serve: listening on {url} (backend {type(backend).__name__}, "
            f"state {Path(opts.state_dir).resolve()})",
            flush=True,
        )

    with contextlib.suppress(KeyboardInterrupt):
        serve(
            backend,
            keys=keys,
            state_dir=opts.state_dir,
            host=opts.host,
            port=opts.listen_port,
            limits=opts.limits,
            allowed_base_models=opts.allow_base_model,
            admin_keys=admin_keys,
            audit=options.audit_of(opts),
            on_ready=ready,
            log_level=opts.log_level,
        )
