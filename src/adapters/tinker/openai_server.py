"""TinkerOpenAIServer: a standalone OpenAI-compatible server over Tinker sampling, for every
caller's own Tinker API key (ART 0.5.23's `OpenAICompatibleTinkerServer`, in arthex).

The bearer token of a request IS the caller's Tinker API key: each key is a tenant with its
own aliases and its own ServiceClient (tenants.py), so a caller sees only its aliases and
samples only what Tinker lets its key sample. A request's `model` is one of the caller's
aliases, else a `tinker://` sampler path, else a base model name.

Routes: `GET /health`, `GET /metrics` (no key); `GET /v1/models`, `GET|PUT|DELETE
/v1/models/{name}` (PUT `{"target": path}` adds or re-points an alias),
`POST /v1/chat/completions`, and `POST /v1/messages_and_choices/with_logprobs` (scores the
choices of an existing conversation under other models). Errors are JSON in OpenAI's shape.

Rendering and sampling are arthex's, not a second stack: the base model's Hugging Face chat
template (ChatTokenizer, shared by every tenant) and TinkerSamplingEngine, with arthex's chat
completion wire (`inference.chat_wire`: logprobs, `prompt_token_ids` and `token_ids` on every choice
unless turned off; Hermes-style tool calls). Scoring uses each choice's own token ids, never
re-rendered text, so the logprobs are of exactly the tokens that were sampled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import socket
from collections import Counter
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from openai.types.chat.chat_completion import Choice
from openai.types.completion_usage import CompletionUsage
from pydantic import ValidationError

try:  # the routes' annotations name these, and FastAPI reads them from this module
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse
    from starlette.exceptions import HTTPException
except ImportError as exc:
    from ...core.errors import MissingExtraError

    raise MissingExtraError(exc.name or "fastapi", "tinker") from exc

from ...core.capture.samples import Built, conversation_tokens
from ...core.errors import ArthexError, BackendError, InvalidInputError, MissingExtraError
from ..inference.asgi import BodyTooLarge, read_body
from ..inference.chat_wire import (
    build_response,
    error_body,
    error_kind,
    parse_request,
    validation_problems,
)
from ..inference.engine import UnknownModelError
from ..inference.http_server import quiet_server
from ..listen import KEEP_ALIVE_S, listen
from .openai_wire import (
    MessagesAndChoicesWithLogprobsArgs,
    ModelUpsert,
    as_json,
)
from .tenants import (
    DEFAULT_TIMEOUT_S,
    AccessRefused,
    ApiKeyTenant,
    TinkerTenant,
    TokenizerCache,
    service_status,
)

__all__ = ["TinkerOpenAIServer", "get_free_port"]

logger = logging.getLogger("arthex")
T = TypeVar("T")

API_KEY_PREFIXES = ("tml-", "eyJ")  # what the pinned SDK accepts: API keys and JWTs
DEFAULT_MAX_CONCURRENT_SAMPLING_CLIENTS = 32
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
CLOSE_TENANTS_S = 45.0  # stop(): finishing the tenants' sessions, all at once


class HttpRefusal(ArthexError):
    """A request answered with `status` and `message` (OpenAI's error shape)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class TinkerOpenAIServer:
    """Serve Tinker sampler paths on `http://{host}:{port}/v1` to any Tinker API key.

    ART's arguments: `host` (default "0.0.0.0", as ART) and `port` (None: a free one);
    `max_concurrent_sampling_clients` (default 32): distinct sampling clients of one base
    model a tenant samples from at once; `num_workers` is accepted for ART's signature and
    checked, but arthex has no rendering worker processes (it renders a chat template on the
    server's event loop, as its other servers do). arthex's: `base_url` of the Tinker
    service (None: the SDK's `TINKER_BASE_URL`, then production), `tokenizers` (a base model ->
    where its tokenizer is, e.g. a local folder; default the base model's own name),
    `timeout_s` for each Tinker call, `default_max_tokens` when a request names none.

    `models` are the aliases of the tenant whose key is in `TINKER_API_KEY` (ART's property).
    """

    def __init__(
        self,
        host: str | None = None,
        port: int | None = None,
        num_workers: int | None = None,
        max_concurrent_sampling_clients: int | None = None,
        *,
        base_url: str | None = None,
        tokenizers: Mapping[str, str] | None = None,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        default_max_tokens: int = 1024,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        for name, value, optional in (
            ("num_workers", num_workers, True),
            ("max_concurrent_sampling_clients", max_concurrent_sampling_clients, True),
            ("default_max_tokens", default_max_tokens, False),
            ("max_body_bytes", max_body_bytes, False),
        ):
            if (value is None and not optional) or (
                value is not None and (type(value) is not int or value < 1)
            ):
                either = " or None" if optional else ""
                raise InvalidInputError(f"{name} must be a positive integer{either}, got {value!r}")
        if port is not None and (type(port) is not int or not 0 <= port <= 65535):
            raise InvalidInputError(f"port must be an integer in 0..65535 or None, got {port!r}")
        if timeout_s is not None and (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, int | float)
            or not 0 < timeout_s < math.inf
        ):
            raise InvalidInputError(
                f"timeout_s must be a positive number or None, got {timeout_s!r}"
            )
        for name, text in (("host", host), ("base_url", base_url)):
            if text is not None and (not isinstance(text, str) or not text.strip()):
                raise InvalidInputError(f"{name} must be a non-empty string or None, got {text!r}")
        if tokenizers is not None and (
            not isinstance(tokenizers, Mapping)
            or not all(
                isinstance(k, str) and isinstance(v, str) and v for k, v in tokenizers.items()
            )
        ):
            raise InvalidInputError(
                "tokenizers must map each base model name to where its tokenizer is (both "
                f"strings), got {tokenizers!r}"
            )
        self.host = host
        self.port = port
        self.num_workers = num_workers
        self.max_concurrent_sampling_clients = max_concurrent_sampling_clients
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.default_max_tokens = default_max_tokens
        self.max_body_bytes = max_body_bytes
        self._tokenizers = TokenizerCache(dict(tokenizers or {}))
        self._tenants: dict[str, TinkerTenant] = {}
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None
        self._socket: socket.socket | None = None
        self.requests: Counter[str] = Counter()

    # ART's `models`: the aliases of TINKER_API_KEY's tenant ---------------------------------

    @property
    def models(self) -> dict[str, str]:
        return self.tenant(_environment_key()).models

    @models.setter
    def models(self, models: dict[str, str]) -> None:
        self.tenant(_environment_key()).replace(models)

    def tenant(self, api_key: str) -> TinkerTenant:
        """The tenant of `api_key` (made on first use; nothing is sent to Tinker until it
        samples)."""
        found = self._tenants.get(api_key)
        if found is None:
            found = self._tenants[api_key] = ApiKeyTenant(
                api_key,
                self.max_concurrent_sampling_clients or DEFAULT_MAX_CONCURRENT_SAMPLING_CLIENTS,
                base_url=self.base_url,
                tokenizers=self._tokenizers,
                timeout_s=self.timeout_s,
            )
        return found

    # lifecycle ------------------------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        """Bind, serve on this event loop, and return (host, port)."""
        if self._task is not None:
            raise BackendError("the Tinker server is already started; stop() it first")
        try:
            import uvicorn
        except ImportError as exc:
            raise MissingExtraError(exc.name or "uvicorn", "tinker") from exc
        host = self.host or "0.0.0.0"
        sock = self._socket = listen(
            host, self.port or 0, "the Tinker server", "port", backlog=2048
        )
        sock.setblocking(False)
        config = uvicorn.Config(
            self.app(),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=5,
            timeout_keep_alive=KEEP_ALIVE_S,
        )
        server = self._server = quiet_server(config)
        self._task = asyncio.create_task(server.serve(sockets=[sock]), name="arthex-tinker-openai")
        while not server.started:
            if self._task.done():
                await self.stop()
                raise BackendError("the Tinker server stopped while starting (see the log above)")
            await asyncio.sleep(0.005)
        return host, int(sock.getsockname()[1])

    async def stop(self) -> None:
        """Stop serving (in-flight requests get 5 s), release the port, and finish each
        tenant's Tinker session (all at once, for at most CLOSE_TENANTS_S); the aliases stay
        for a later start(). Cancelling stop() stops the server without waiting for the
        requests in flight, cleans up, and the cancellation goes on to the caller."""
        server, task, sock = self._server, self._task, self._socket
        self._server = self._task = self._socket = None
        if server is not None:
            server.should_exit = True
        try:
            if task is not None:
                await asyncio.wait({task})
                if not task.cancelled() and task.exception() is not None:
                    logger.warning("the Tinker server ended with %r", task.exception())
        finally:
            if server is not None and task is not None and not task.done():
                # stop() itself was cancelled: uvicorn closes its listeners without waiting
                # for the requests in flight (cancelling its task would skip that)
                server.force_exit = True
                await asyncio.wait({task}, timeout=CLOSE_TENANTS_S)
                if not task.done():
                    task.cancel()
            if sock is not None:
                sock.close()
            await self._close_tenants()

    async def _close_tenants(self) -> None:
        closing = [asyncio.ensure_future(tenant.close()) for tenant in self._tenants.values()]
        if not closing:
            return
        _, late = await asyncio.wait(closing, timeout=CLOSE_TENANTS_S)
        for task in late:
            task.cancel()
        if late:
            logger.warning("%d Tinker sessions did not finish in %s s", len(late), CLOSE_TENANTS_S)

    @contextlib.asynccontextmanager
    async def _serving(self, key: str) -> AsyncIterator[TinkerTenant]:
        """The tenant of `key`, counted as in use while a request samples with it. A key
        Tinker refuses (401) leaves nothing behind: its tenant is dropped once no request uses
        it, unless it holds aliases. A 403 (this key may not use that model) drops nothing."""
        tenant = self.tenant(key)
        try:
            with tenant.in_use():
                yield tenant
        except Exception as exc:
            refused = service_status(exc) == 401
            if refused and tenant.idle and not tenant.models and self._tenants.get(key) is tenant:
                del self._tenants[key]
                await tenant.close()
            raise

    # the app --------------------------------------------------------------------------------

    def app(self) -> FastAPI:
        """The ASGI app."""
        app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

        def refusal(status: int, message: str) -> JSONResponse:
            return JSONResponse(error_body(message, error_kind(status), status), status_code=status)

        async def refused(request: Request, exc: Exception) -> JSONResponse:
            status, message = _status_and_message(exc)
            self.requests[f"{request.method} {_route(request)} {status}"] += 1
            if status >= 500:
                logger.warning("Tinker server: %s %s: %s", request.method, request.url, message)
            return refusal(status, message)

        async def http_error(request: Request, exc: Exception) -> JSONResponse:
            assert isinstance(exc, HTTPException)
            return refusal(exc.status_code, str(exc.detail))

        app.add_exception_handler(Exception, refused)
        app.add_exception_handler(ArthexError, refused)
        app.add_exception_handler(HTTPException, http_error)

        def key_of(request: Request) -> str:
            auth = request.headers.get("authorization", "")
            scheme, _, key = auth.partition(" ")
            key = key.strip()
            if scheme.lower() != "bearer" or not key:
                raise HttpRefusal(
                    401, "missing or invalid Authorization header; send 'Authorization: Bearer "
                    "<your Tinker API key>'",
                )  # fmt: skip
            if not key.startswith(API_KEY_PREFIXES):
                raise HttpRefusal(
                    401, "the bearer token is not a Tinker API key (they start with 'tml-'); "
                    "send your own Tinker API key",
                )  # fmt: skip
            return key

        def known(request: Request) -> TinkerTenant | None:
            """The caller's tenant if it has one: routes that only read make none."""
            return self._tenants.get(key_of(request))

        async def body_of(request: Request) -> bytes:
            """The body, refused (413) as soon as its declared length or the bytes received
            pass max_body_bytes, not after it has all been buffered."""
            try:
                body = await read_body(request.scope, request.receive, self.max_body_bytes)
            except BodyTooLarge:
                raise HttpRefusal(
                    413, f"the request body is larger than {self.max_body_bytes} bytes"
                ) from None
            if body is None:
                raise HttpRefusal(400, "the client disconnected before the end of its request")
            return body

        def counted(request: Request) -> None:
            self.requests[f"{request.method} {_route(request)} 200"] += 1

        @app.get("/health")
        async def health() -> dict[str, str]:
            return {"status": "ok"}

        @app.get("/metrics")
        async def metrics() -> PlainTextResponse:
            lines = ["# TYPE arthex_tinker_requests counter"]
            for key, count in sorted(self.requests.items()):
                method, route, status = key.split(" ")
                lines.append(
                    f'arthex_tinker_requests{{method="{method}",route="{route}",'
                    f'status="{status}"}} {count}'
                )
            lines.append(f"arthex_tinker_tenants {len(self._tenants)}")
            return PlainTextResponse("\n".join(lines) + "\n")

        @app.get("/v1/models")
        async def list_models(request: Request) -> dict[str, Any]:
            tenant = known(request)
            counted(request)
            return {
                "object": "list",
                "data": [_model(name, tenant) for name in tenant.models] if tenant else [],
            }

        @app.get("/v1/models/{name:path}")
        async def get_model(request: Request, name: str) -> dict[str, Any]:
            tenant = known(request)
            if tenant is None or name not in tenant.models:
                raise HttpRefusal(404, f"model not found: {name!r} is not one of your aliases")
            counted(request)
            return _model(name, tenant)

        @app.put("/v1/models/{name:path}")
        async def put_model(request: Request, name: str) -> dict[str, Any]:
            key = key_of(request)
            try:
                upsert = ModelUpsert.model_validate_json(await body_of(request))
            except ValidationError as exc:
                raise HttpRefusal(
                    400, f"PUT /v1/models/{name}: {validation_problems(exc)}"
                ) from exc
            tenant = self.tenant(key)
            tenant.put(name, upsert.target)
            counted(request)
            return _model(name, tenant)

        @app.delete("/v1/models/{name:path}")
        async def delete_model(request: Request, name: str) -> dict[str, Any]:
            key = key_of(request)
            tenant = self._tenants.get(key)
            if tenant is None or not tenant.delete(name):
                raise HttpRefusal(404, f"model not found: {name!r} is not one of your aliases")
            if not tenant.models and tenant.idle:  # nothing of the caller's is kept any more
                del self._tenants[key]
                await tenant.close()
            counted(request)
            return {"id": name, "deleted": True, "object": "model"}

        @app.post("/v1/chat/completions")
        async def chat_completions(request: Request) -> dict[str, Any]:
            key = key_of(request)
            parsed = parse_request(await body_of(request))
            template_kwargs = _honoured_extras(parsed.model_extra or {})
            async with self._serving(key) as tenant:
                engine, target = await tenant.open(parsed.model)
                params = parsed.sampling_params(self.default_max_tokens)
                messages = [message.model_dump(exclude_unset=True) for message in parsed.messages]
                prompt = engine.render_chat(
                    target, messages, parsed.tools, template_kwargs=template_kwargs
                )
                async with tenant.slots(engine).hold(target):
                    samples = await engine.sample(target, prompt, parsed.n, params)
            answer = build_response(
                engine, parsed.model_copy(update={"model": target}), prompt, samples, params
            )
            answer["model"] = parsed.model
            counted(request)
            return answer

        @app.post("/v1/messages_and_choices/with_logprobs")
        async def with_logprobs(request: Request) -> dict[str, Any]:
            key = key_of(request)
            try:
                raw = json.loads(await body_of(request))
                args = MessagesAndChoicesWithLogprobsArgs.model_validate(raw)
            except ValueError as exc:  # JSON's errors and pydantic's ValidationError
                detail = validation_problems(exc) if isinstance(exc, ValidationError) else str(exc)
                raise HttpRefusal(400, f"with_logprobs: {detail}") from exc
            items: list[Any] = list(args.messages_and_choices)
            sequences = conversation_tokens(  # a Choice without its token ids: 400, here
                items, "with_logprobs", "messages_and_choices", allow_without_logprobs=True
            )
            if sum(len(offsets) for *_, offsets in sequences) != sum(
                isinstance(item, Choice) for item in items
            ):
                raise HttpRefusal(400, "with_logprobs: a Choice has no tokens to score")
            if any(len(tokens) < 2 for tokens, *_ in sequences):
                raise HttpRefusal(
                    400, "with_logprobs: a Choice's prompt and sampled tokens are fewer than two "
                    "(scoring needs two: the first token has no logprob)",
                )  # fmt: skip
            async with self._serving(key) as tenant:
                usages = await _together(
                    _score(tenant, model, args.model_aliases.get(model, model), items, sequences)
                    for model in args.models
                )
            counted(request)
            return {
                "messages_and_choices": [as_json(item) for item in items],
                "usages": [usage.model_dump(mode="json") for usage in usages],
            }

        return app


async def _together(coroutines: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Run `coroutines` at once and return their results in order; the first to fail cancels
    the others (no more Tinker calls for an answer that is already an error) and is raised as
    itself, not in an ExceptionGroup."""
    failure: BaseException | None = None
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(coroutine) for coroutine in coroutines]
    except BaseExceptionGroup as failed:
        failure = failed.exceptions[0]
    if failure is not None:
        raise failure  # outside the handler: its own cause and context stay as they were
    return [task.result() for task in tasks]


async def _score(
    tenant: TinkerTenant, model: str, key: str, items: list[Any], sequences: list[Built]
) -> CompletionUsage:
    """Add `extra_logprobs[key]` (the logprob `model` gives each sampled token of each
    choice) to the choices' token logprob entries; the usage of the scoring requests."""
    engine, target = await tenant.open(model)  # an unknown model is refused, choices or not
    if not sequences:
        return CompletionUsage(completion_tokens=0, prompt_tokens=0, total_tokens=0)
    async with tenant.slots(engine).hold(target):
        scores = await _together(engine.score(target, tokens) for tokens, *_ in sequences)
    starts = [(s, offset) for s, (*_, offsets) in enumerate(sequences) for offset in offsets]
    choices = [item for item in items if isinstance(item, Choice)]
    for choice, (s, offset) in zip(choices, starts, strict=True):
        entries = (choice.logprobs.content or []) if choice.logprobs is not None else []
        for i, entry in enumerate(entries):
            value = scores[s][offset + i]
            if entry.model_extra is not None:  # openai's models keep extra fields
                entry.model_extra.setdefault("extra_logprobs", {})[key] = (
                    value if value is None or math.isfinite(value) else None
                )
    prompt_tokens = sum(len(tokens) for tokens, *_ in sequences)
    return CompletionUsage(
        completion_tokens=len(sequences),
        prompt_tokens=prompt_tokens,
        total_tokens=prompt_tokens + len(sequences),
    )


def _honoured_extras(extra: Mapping[str, Any]) -> dict[str, Any]:
    """The chat template's variables a request names (`chat_template_kwargs`, as vLLM and
    ART take them); a `top_k` other than off (0 or -1) is refused: it would change the
    output and is not passed to Tinker here."""
    top_k = extra.get("top_k")
    if top_k is not None and (type(top_k) is not int or top_k not in (0, -1)):
        raise InvalidInputError(
            f"top_k is not supported by this server (got {top_k!r}); leave it unset, 0 or -1"
        )
    kwargs = extra.get("chat_template_kwargs")
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict) or not all(isinstance(name, str) for name in kwargs):
        raise InvalidInputError(
            f"chat_template_kwargs must be a JSON object of the template's variables, got "
            f"{kwargs!r}"
        )
    taken = sorted(set(kwargs) & _RENDERING_ARGUMENTS)
    if taken:
        raise InvalidInputError(
            f"chat_template_kwargs may not set {', '.join(taken)} (the server sets them)"
        )
    return kwargs


_RENDERING_ARGUMENTS = frozenset(
    {"conversation", "tools", "documents", "add_generation_prompt", "tokenize", "return_dict",
     "continue_final_message", "padding", "truncation", "max_length", "return_tensors",
     "return_assistant_tokens_mask", "tokenizer_kwargs", "chat_template"}
)  # fmt: skip


def _model(name: str, tenant: TinkerTenant) -> dict[str, Any]:
    created = tenant.model_timestamps.get(name, 0)
    return {"id": name, "created": created, "object": "model", "owned_by": "tinker"}


def _status_and_message(exc: BaseException) -> tuple[int, str]:
    if isinstance(exc, HttpRefusal):
        return exc.status, str(exc)
    if isinstance(exc, UnknownModelError):
        return 404, str(exc)
    if isinstance(exc, InvalidInputError):
        return 400, str(exc)
    if isinstance(exc, AccessRefused):
        return 403, str(exc)
    status = service_status(exc)
    if status == 401:
        return status, f"Tinker refused this API key: {exc}"
    if status == 403:
        return status, f"Tinker refused access: {exc}"
    if status in (404, 429):
        return status, str(exc)
    if isinstance(exc, BackendError):
        return 502, str(exc)
    return 500, f"{type(exc).__name__}: {exc}"


def _route(request: Any) -> str:
    route = request.scope.get("route")
    return str(getattr(route, "path", request.url.path)).replace(" ", "")


def _environment_key() -> str:
    key = os.environ.get("TINKER_API_KEY")
    if not key:
        raise InvalidInputError(
            "TINKER_API_KEY is not set: the server's `models` are the aliases of the tenant "
            "whose Tinker API key it holds"
        )
    return key


def get_free_port(host: str | None = None) -> int:
    """The first port from 8000 up that `host` (default: every address) can bind now."""
    port = 8000
    while port <= 65535:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host or "", port))
                return port
            except OSError:
                port += 1
    raise BackendError(f"no free port from 8000 up on {host or 'any address'}")
