"""The OpenAI-compatible HTTP server, in-process on the caller's event loop.

It runs uvicorn as a task on the current loop rather than in a thread or a subprocess: the
engine's batching queue lives on that loop, and rollouts in the same process reach the
server over loopback without a second interpreter (after that loop ends, the next one takes
the server over: `follow_running_loop`). Every `/v1` route needs the bearer key;
`/health` does not. Request bodies are capped (413) and every failure is a JSON error in
OpenAI's shape, never a dead server.

Every choice carries what training needs unless the request turns it off: token ids
(`prompt_token_ids`, `token_ids`; off with `return_token_ids: false`) and logprobs (off with
`logprobs: false`), so rollouts that never ask for logprobs can be trained, as with ART.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import importlib
import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ...core.errors import (
    BackendError,
    InvalidInputError,
    MissingExtraError,
    ServingUnavailableError,
)
from ..listen import KEEP_ALIVE_S, listen
from .asgi import (
    ASGIApp,
    BodyTooLarge,
    Receive,
    Scope,
    Send,
    header,
    read_body,
    replaying,
    send_json,
)
from .chat_wire import build_response, error_body, error_kind, parse_request
from .engine import SamplingEngine, UnknownModelError

if TYPE_CHECKING:
    import uvicorn

__all__ = ["InferenceServer", "create_app", "quiet_server"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
CHAT_COMPLETIONS = "/v1/chat/completions"


class InferenceServer:
    """Serve `engine` at `http://{host}:{port}/v1`. With `api_key=None` a random key is made
    (read it from `.api_key`); `port=0` picks a free port. Use `async with` or start/stop."""

    def __init__(
        self,
        engine: SamplingEngine,
        *,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        default_max_tokens: int = 1024,
    ) -> None:
        if api_key is not None and not api_key:
            raise InvalidInputError("api_key must be a non-empty string, or None for a random one")
        self.engine = engine
        self.api_key = api_key if api_key is not None else secrets.token_urlsafe(24)
        self.host = host
        self.port = port
        self.max_body_bytes = max_body_bytes
        self.default_max_tokens = default_max_tokens
        self._server: Any = None
        self._config: Any = None  # uvicorn's, kept to serve again from another loop
        self._moving = threading.Lock()  # two threads' new loops: one takes the server over
        self._task: asyncio.Task[None] | None = None
        self._socket: socket.socket | None = None
        self._base_url: str | None = None

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise BackendError("the inference server is not started; await server.start()")
        return self._base_url

    async def start(self) -> str:
        """Bind, start serving on this event loop, and return the base URL (ending in /v1)."""
        if self._base_url is not None:
            return self._base_url
        try:
            import uvicorn
        except ImportError as exc:
            raise MissingExtraError("uvicorn", "local") from exc
        app = create_app(
            self.engine,
            api_key=self.api_key,
            max_body_bytes=self.max_body_bytes,
            default_max_tokens=self.default_max_tokens,
        )
        try:
            sock = listen(self.host, self.port, "the inference server", "port", backlog=2048)
        except InvalidInputError as exc:
            raise ServingUnavailableError(str(exc)) from exc
        sock.setblocking(False)
        family = sock.family
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=5,
            timeout_keep_alive=KEEP_ALIVE_S,
        )
        server = quiet_server(config)
        self._socket = sock
        self._server = server
        self._config = config
        self._task = asyncio.create_task(server.serve(sockets=[sock]), name="arthex-inference")
        while not server.started:
            if self._task.done():
                await self._cleanup()
                raise ServingUnavailableError(
                    "the inference server failed to start (see the log above)"
                )
            await asyncio.sleep(0.005)
        port = sock.getsockname()[1]
        host = f"[{self.host}]" if family == socket.AF_INET6 else self.host
        self._base_url = f"http://{host}:{port}/v1"
        return self._base_url

    def follow_running_loop(self) -> None:
        """Serve from the running event loop when the loop this server ran on has ended.

        A script that calls `asyncio.run` twice ends the first loop with the server's task on
        it; the listening socket stays open, so requests would wait in its backlog forever.
        Called from the next loop (the model's `openai_client()` does), this starts uvicorn
        there on the same socket: same address, same key, the engine unchanged. A no-op when
        the server is stopped, already on this loop, or on a loop that is still open (another
        thread's), and outside a running loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        with self._moving:
            task = self._task
            if task is None or self._socket is None or self._config is None:
                return
            old = task.get_loop()
            if old is loop or not old.is_closed():
                return
            server = quiet_server(self._config)
            self._server = server
            self._task = loop.create_task(
                server.serve(sockets=[self._socket]), name="arthex-inference"
            )

    async def stop(self) -> None:
        """Stop accepting, finish in-flight requests (5 s grace), and release the port. The
        engine is the caller's to close."""
        if self._server is not None:
            self._server.should_exit = True
        await self._cleanup()

    async def _cleanup(self) -> None:
        if self._task is not None:
            with contextlib.suppress(BaseException):
                await self._task
        if self._socket is not None:
            self._socket.close()
        self._task = self._server = self._socket = self._base_url = self._config = None

    async def __aenter__(self) -> InferenceServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()


def quiet_server(config: uvicorn.Config) -> uvicorn.Server:
    """A uvicorn server for `config` that leaves SIGINT/SIGTERM to the host program."""
    import uvicorn

    class QuietServer(uvicorn.Server):
        """uvicorn would take over SIGINT/SIGTERM while serving; the host program owns them."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:  # uvicorn >= 0.29
            yield

        def install_signal_handlers(self) -> None:  # older uvicorn
            return None

    return QuietServer(config)


def create_app(
    engine: SamplingEngine,
    *,
    api_key: str,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    default_max_tokens: int = 1024,
) -> ASGIApp:
    """The ASGI app: FastAPI routes behind a guard for the key and the body size. The guard
    answers chat completions itself: under load that route is most of the server's work,
    and the framework's layers of middleware cost more than the route does."""
    try:
        from fastapi import FastAPI
        from fastapi.responses import JSONResponse
        from starlette.exceptions import HTTPException
    except ImportError as exc:
        raise MissingExtraError("fastapi", "local") from exc

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    async def http_error(_request: Any, exc: Exception) -> JSONResponse:
        # Unknown paths and wrong methods: the OpenAI error shape, like every other error.
        assert isinstance(exc, HTTPException)
        kind = error_kind(exc.status_code, "BadRequestError")
        return JSONResponse(
            error_body(str(exc.detail), kind, exc.status_code),
            status_code=exc.status_code,
            headers=exc.headers,
        )

    app.add_exception_handler(HTTPException, http_error)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        created = int(time.time())
        return {
            "object": "list",
            "data": [
                {"id": name, "object": "model", "created": created, "owned_by": "arthex"}
                for name in engine.served_models()
            ],
        }

    async def chat_completions(body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            parsed = parse_request(body)
            params = parsed.sampling_params(default_max_tokens)
            messages = [message.model_dump(exclude_unset=True) for message in parsed.messages]
            prompt = engine.render_chat(parsed.model, messages, parsed.tools)
            samples = await engine.sample(parsed.model, prompt, parsed.n, params)
            return 200, build_response(engine, parsed, prompt, samples, params)
        except UnknownModelError as exc:
            return 404, error_body(str(exc), "NotFoundError", 404, "model")
        except InvalidInputError as exc:
            return 400, error_body(str(exc), "BadRequestError", 400)
        except Exception as exc:
            logger.exception("chat completion failed")
            message = f"{type(exc).__name__}: {exc}"
            return 500, error_body(message, "InternalServerError", 500)

    return _Guard(
        app, chat_completions=chat_completions, api_key=api_key, max_body_bytes=max_body_bytes
    )


class _Guard:
    """ASGI wrapper: bearer key on /v1 (compared in constant time), a body size cap, and a
    JSON error for whatever the framework itself rejects."""

    def __init__(
        self,
        app: Any,
        *,
        chat_completions: Callable[[bytes], Awaitable[tuple[int, dict[str, Any]]]],
        api_key: str,
        max_body_bytes: int,
    ) -> None:
        self.app = app
        self._chat_completions = chat_completions
        self._key = api_key.encode()
        self._max = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"].startswith("/v1") and not self._authorized(scope):
            hint = "missing or wrong API key; send 'Authorization: Bearer <key>'"
            await _send_json(send, 401, error_body(hint, "AuthenticationError", 401))
            return
        try:
            body = await read_body(scope, receive, self._max)
        except BodyTooLarge:
            await self._too_large(send)
            return
        if body is None:
            return
        if scope["path"] == CHAT_COMPLETIONS:
            if scope["method"] == "POST":
                await self._complete(body, receive, send)
            else:
                hint = f"{scope['method']} is not allowed here; POST a chat completion request"
                await _send_json(send, 405, error_body(hint, "MethodNotAllowed", 405))
            return
        await self.app(scope, replaying(body, receive), send)

    async def _complete(self, body: bytes, receive: Receive, send: Send) -> None:
        """Answer a chat completion, or drop it when the client disconnects first: its
        rows then leave the engine's batch instead of generating for nobody."""
        answer = asyncio.ensure_future(self._chat_completions(body))
        gone = asyncio.ensure_future(_disconnect(receive))
        try:
            await asyncio.wait((answer, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not answer.done():
                answer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await answer
        if not answer.cancelled():
            status, payload = answer.result()
            await _send_json(send, status, payload)

    def _authorized(self, scope: Scope) -> bool:
        value = header(scope, b"authorization")
        if value is None:
            return False
        scheme, _, token = value.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self._key)

    async def _too_large(self, send: Send) -> None:
        message = f"the request body is larger than {self._max} bytes"
        await _send_json(send, 413, error_body(message, "RequestTooLarge", 413))


async def _disconnect(receive: Receive) -> None:
    """Return when the client disconnects. With the body read, the next message an ASGI
    server sends is the disconnect, whenever it comes; a server that sends anything else
    does not report disconnects, and then this never returns."""
    if (await receive())["type"] != "http.disconnect":
        await asyncio.Event().wait()


async def _send_json(send: Send, status: int, payload: dict[str, Any]) -> None:
    await send_json(send, status, _dumps(payload))


def _dumps(payload: dict[str, Any]) -> bytes:
    """Compact JSON; orjson's encoder when it is installed (several times faster on a
    response that spells out every token's logprobs), else the standard library's. Text
    that is not valid UTF-8 (a lone surrogate from a request's escapes) is sent escaped."""
    if _orjson is not None:
        with contextlib.suppress(TypeError):  # orjson.JSONEncodeError is a TypeError
            encoded: bytes = _orjson.dumps(payload)
            return encoded
    try:
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        return json.dumps(payload, separators=(",", ":")).encode()


def _optional_orjson() -> Any:
    try:
        return importlib.import_module("orjson")
    except ImportError:  # an optional speed-up, not a dependency
        return None


_orjson: Any = _optional_orjson()
