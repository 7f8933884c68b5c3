"""The two ASGI apps of `arthex serve --protocol art`, each behind the server's Guard.

The ART API (ART 0.5.17's `art run` routes, bodies and answers):

    GET  /healthcheck                    {"status": "ok"} (no key, before the guard)
    POST /register                       the model JSON -> null
    POST /_get_step                      the model JSON -> the newest step (0 when none)
    POST /_prepare_backend_for_training  {model, config} -> [inference base_url, api_key]
    POST /_delete_checkpoint_files       {model, steps_to_keep} -> null
    POST /_train_model                   {model, trajectory_groups, config, dev_config,
                                         verbose} -> one JSON object per line, per gradient
                                         step, every value a number
    POST /close                          null (the server keeps serving its other clients)

Errors are ART's shape, `{"detail": message}`, with a 4xx status for anything the request got
wrong (400 not JSON, 401 no or wrong key when `--keys` is given, 404 unknown route, 409 a
conflict with a registered model, 413 body too large, 422 an invalid field, 429 rate limit,
431 headers too large, 501 a capability the backend lacks, 503 the server stopped during the
update, which was rolled back); 500 only for a server fault, its
message scrubbed of the server's paths. An update that fails after its stream started ends
the stream without its last chunk, so the client raises instead of reading a short update
as complete.

The inference app (OpenAI's shapes): `GET /v1/models` (the registered models' served names,
`{name}@{step}` and `{name}` for the latest) and `POST /v1/chat/completions`, relayed to the
backend's own inference server; `GET /health` without a key. Its key: the one `/_prepare_...`
answered (ART's: the client's `server_args.api_key`, else "default"), or with `--keys` any
key of that file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ....adapters.inference.asgi import ASGIApp, Receive, Scope, Send
from ....adapters.serverless import wire as serverless_wire
from ....adapters.serverless.errors import http_answer
from ....core.errors import ArthexError, BackendError, InvalidInputError
from ..bodies import BadJsonError, json_object
from ..guard import Guard, bearer_token, send_json
from ..keys import KeyRing
from ..limits import ServerLimits
from ..proxy import open_upstream, read_body, streamed
from .service import ArtConflictError, ArtService, ServerStoppedError
from .wire import parse_groups, parse_model, parse_steps, train_config

if TYPE_CHECKING:
    import httpx
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = ["InferenceKeys", "art_error", "create_api_app", "create_inference_app"]

logger = logging.getLogger("arthex.art_protocol")

ART_DEFAULT_API_KEY = "default"  # what ART's server answers when the client names none


def art_error(status: int, message: str, _kind: str = "") -> dict[str, Any]:
    """ART's error body (its ARTError handler's, FastAPI's HTTPException's)."""
    return {"detail": message}


def _openai_error(status: int, message: str, kind: str) -> dict[str, Any]:
    return serverless_wire.error_body(status, message, kind)


class InferenceKeys:
    """The inference server's keys: `--keys`' ring, or the keys `/_prepare_...` handed out."""

    def __init__(self, ring: KeyRing | None) -> None:
        self.ring = ring
        self._given: dict[bytes, None] = {}
        if ring is None:
            self.add(ART_DEFAULT_API_KEY)

    def add(self, key: str) -> None:
        self._given[hashlib.sha256(key.encode()).digest()] = None

    def current(self) -> KeyRing:
        if self.ring is not None:
            return self.ring
        return KeyRing(tuple(("art", digest) for digest in self._given))


class _Health:
    """Answers a GET of `path` with `{"status": "ok"}` before anything else runs."""

    def __init__(self, app: ASGIApp, path: str) -> None:
        self.app = app
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == self.path and scope["method"] == "GET":
            await send_json(send, 200, {"status": "ok"})
            return
        await self.app(scope, receive, send)


class _LiveKeys(Guard):
    """A Guard whose keys are read from `InferenceKeys` at each request."""

    def __init__(self, app: ASGIApp, keys: InferenceKeys, **kwargs: Any) -> None:
        super().__init__(app, keys=keys.current(), **kwargs)
        self._live = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.keys = self._live.current()
        await super().__call__(scope, receive, send)


Handler = Callable[["Request"], Awaitable[Any]]


def _starlette(
    routes: list[tuple[str, str, Handler]],
    error_body: Callable[[int, str, str], dict[str, Any]],
    scrub: Callable[[str], str],
) -> Any:
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    def refused(request: Request, exc: Exception) -> Response:
        response = answer(exc)
        if response.status_code < 500:  # a client that swallows errors still leaves a trace
            logger.warning(
                "%s %s refused (%d): %s",
                request.method,
                request.url.path,
                response.status_code,
                exc,
            )
        return response

    def answer(exc: Exception) -> Response:
        if isinstance(exc, BadJsonError):
            status, kind = 400, serverless_wire.INVALID_REQUEST
        elif isinstance(exc, ArtConflictError):
            status, kind = 409, serverless_wire.INVALID_REQUEST
        elif isinstance(exc, ServerStoppedError):
            status, kind = 503, serverless_wire.INTERNAL_ERROR
        else:
            found = http_answer(exc)
            if found is None:
                if isinstance(exc, ArthexError):
                    logger.error("request failed: %s", exc)
                else:
                    logger.exception("unexpected error", exc_info=exc)
                message = scrub(str(exc) if isinstance(exc, ArthexError) else type(exc).__name__)
                return JSONResponse(
                    error_body(500, message, serverless_wire.INTERNAL_ERROR), status_code=500
                )
            status, kind, _param = found
        return JSONResponse(error_body(status, str(exc), kind), status_code=status)

    def endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            try:
                result = await handler(request)
            except Exception as exc:
                return refused(request, exc)
            return result if isinstance(result, Response) else JSONResponse(result)

        return run

    async def http_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = serverless_wire.NOT_FOUND if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(
            error_body(exc.status_code, str(exc.detail), kind), status_code=exc.status_code
        )

    return Starlette(
        routes=[Route(path, endpoint(h), methods=[method]) for method, path, h in routes],
        exception_handlers={HTTPException: http_error},
    )


def _scrubber(*paths: str) -> Callable[[str], str]:
    def scrub(text: str) -> str:
        for path in paths:
            if path:
                text = text.replace(path, "<server>")
        return text

    return scrub


def create_api_app(
    service: ArtService,
    *,
    keys: KeyRing | None,
    inference_keys: InferenceKeys,
    limits: ServerLimits,
) -> ASGIApp:
    """The ART API, behind the Guard (header caps, the key when `keys` is given, the rate,
    the body cap)."""
    from starlette.responses import StreamingResponse

    def model_of(body: dict[str, Any]) -> Any:
        if "model" not in body:
            raise InvalidInputError("the body has no 'model'; send {\"model\": <the model>, ...}")
        return parse_model(body["model"], "model")

    async def register(request: Request) -> None:
        await service.register(parse_model(json_object(request.scope)))

    async def get_step(request: Request) -> int:
        return await service.get_step(parse_model(json_object(request.scope)))

    async def delete_checkpoint_files(request: Request) -> None:
        body = json_object(request.scope)
        model = model_of(body)
        if "steps_to_keep" not in body:
            raise InvalidInputError("the body has no 'steps_to_keep'")
        await service.delete_checkpoints(model, parse_steps(body["steps_to_keep"]))

    async def prepare(request: Request) -> list[str]:
        body = json_object(request.scope)
        model = model_of(body)
        api_key = _inference_key(body.get("config"), request.scope, keys)
        await service.prepare(model)
        if keys is None:
            inference_keys.add(api_key)
        return [service.inference_base_url(), api_key]

    async def train_model(request: Request) -> Any:
        body = json_object(request.scope)
        model = model_of(body)
        groups = parse_groups(body.get("trajectory_groups"))
        config = train_config(body.get("config"), body.get("dev_config"), model)
        job = await service.start_train(model, groups, config)
        first = await job.next()  # a failure before the first step is still a plain error

        async def lines() -> AsyncIterator[bytes]:
            metrics = first
            while metrics is not None:
                yield (json.dumps(metrics) + "\n").encode()
                metrics = await job.next()  # a failure here aborts the stream

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    async def close(_request: Request) -> None:
        return None

    routes: list[tuple[str, str, Handler]] = [
        ("POST", "/register", register),
        ("POST", "/_get_step", get_step),
        ("POST", "/_delete_checkpoint_files", delete_checkpoint_files),
        ("POST", "/_prepare_backend_for_training", prepare),
        ("POST", "/_train_model", train_model),
        ("POST", "/close", close),
    ]
    scrub = _scrubber(str(service.base_path.resolve()), str(service.base_path))
    app = _starlette(routes, art_error, scrub)
    guard = Guard(app, keys=keys, limits=limits, error_shape=art_error)
    return _Health(guard, "/healthcheck")


def _inference_key(config: object, scope: Scope, keys: KeyRing | None) -> str:
    """The key the client is to sample with: with `--keys`, the key it called with; else the
    one its `server_args.api_key` names, else ART's "default"."""
    if keys is not None:
        token = bearer_token(scope)
        assert token is not None  # the Guard let it in
        return token
    if config is None:
        return ART_DEFAULT_API_KEY
    if not isinstance(config, dict):
        raise InvalidInputError("config must be a JSON object (ART's OpenAIServerConfig) or null")
    server_args = config.get("server_args") or {}
    if not isinstance(server_args, dict):
        raise InvalidInputError("config.server_args must be a JSON object")
    key = server_args.get("api_key")
    if key is None:
        return ART_DEFAULT_API_KEY
    if not isinstance(key, str) or re.fullmatch(r"[\x21-\x7e]{1,256}", key) is None:
        raise InvalidInputError("config.server_args.api_key must be 1-256 printable characters")
    return key


def create_inference_app(
    service: ArtService,
    *,
    keys: InferenceKeys,
    limits: ServerLimits,
    http: Callable[[], httpx.AsyncClient],
) -> ASGIApp:
    """The OpenAI-compatible server on the inference port: the registered models' names,
    relayed to the backend's inference server."""

    async def list_models(_request: Request) -> dict[str, Any]:
        import httpx

        data: list[dict[str, Any]] = []
        for endpoint, names in service.endpoints():
            try:
                response = await http().get(
                    endpoint.base_url.rstrip("/") + "/models",
                    headers={"Authorization": f"Bearer {endpoint.api_key}"},
                    timeout=30.0,
                )
                response.raise_for_status()
                served = [str(item["id"]) for item in response.json().get("data", [])]
            except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise BackendError(f"the backend's inference server did not answer: {exc}") from exc
            for served_name in served:
                if served_name.partition("@")[0] in names:
                    data.append({"id": served_name, "object": "model", "owned_by": "arthex"})
        data.sort(key=lambda item: item["id"])
        return {"object": "list", "data": data}

    async def chat_completions(request: Request) -> Response:
        return await _relay(service, http(), json_object(request.scope), "/chat/completions")

    routes: list[tuple[str, str, Handler]] = [
        ("GET", "/v1/models", list_models),
        ("POST", "/v1/chat/completions", chat_completions),
    ]
    app = _starlette(routes, _openai_error, _scrubber(str(service.base_path.resolve())))
    return _Health(_LiveKeys(app, keys, limits=limits), "/health")


async def _relay(
    service: ArtService, http: httpx.AsyncClient, body: dict[str, Any], path: str
) -> Response:
    from starlette.responses import JSONResponse, Response

    requested = body.get("model")
    if not isinstance(requested, str):
        raise InvalidInputError("model must be a string: '{name}@{step}', or '{name}' (latest)")
    endpoint = service.endpoint_for(requested)
    if endpoint is None:
        message = f"model {requested!r} is not served here; GET /v1/models lists the names"
        return JSONResponse(_openai_error(404, message, serverless_wire.NOT_FOUND), status_code=404)
    upstream = await open_upstream(http, endpoint, path, body)
    stream = streamed(upstream)
    if stream is not None:
        return stream
    content = await read_body(upstream)
    content_type = upstream.headers.get("content-type", "application/json")
    return Response(content, status_code=upstream.status_code, media_type=content_type)
