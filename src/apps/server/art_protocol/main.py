"""`arthex serve --protocol art`: the ART API and the inference server, in one process.

    arthex serve --protocol art --backend local --base-path ./.art
    # ART API on 127.0.0.1:7999, OpenAI-compatible inference on 127.0.0.1:8000/v1

Both listen on `--host` (loopback by default; any other address needs `--insecure-bind`, as
ART's protocol carries no key). Both are served on one event loop with the backend; nothing
runs in a child process, so when the server dies every socket it held closes with it.
SIGINT/SIGTERM stops both: running updates are cancelled (the backend rolls each back to its
latest checkpoint) and the backend is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ....core.errors import ArthexError, InvalidInputError, MissingExtraError
from ....ports.training_backend import TrainingBackend
from ...listen import listen
from ..http_protocol import head_capped_protocol
from ..keys import KeyRing
from ..limits import ServerLimits
from ..options import ServeOptions, is_loopback
from ..preload import backend_named
from .app import InferenceKeys, art_error, create_api_app, create_inference_app
from .service import ArtService

if TYPE_CHECKING:
    import httpx

__all__ = ["run_art", "serve_art"]

logger = logging.getLogger("arthex.art_protocol")


def _signal_free(config: Any) -> Any:
    """A uvicorn server that leaves SIGINT/SIGTERM alone: `serve_art` owns them, so both
    servers stop together and the running updates end before the process does."""
    import uvicorn

    class SignalFreeServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Any:  # uvicorn >= 0.29
            yield

        def install_signal_handlers(self) -> None:  # older uvicorn
            return None

    return SignalFreeServer(config)


def _url(host: str, sock: socket.socket) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{sock.getsockname()[1]}"


async def serve_art(
    backend: TrainingBackend,
    *,
    base_path: str | Path,
    host: str = "127.0.0.1",
    port: int = 7999,
    inference_port: int = 8000,
    keys: KeyRing | None = None,
    limits: ServerLimits | None = None,
    allowed_base_models: frozenset[str] | None = None,
    on_ready: Callable[[str, str], None] | None = None,
    log_level: str = "warning",
) -> None:
    """Serve until SIGINT/SIGTERM (or cancellation); the backend is closed on the way out.
    `on_ready` gets the API's URL and the inference base URL once both listen."""
    try:
        import httpx
        import uvicorn
    except ImportError as exc:
        raise MissingExtraError(exc.name or "uvicorn", "server") from exc
    limits = limits if limits is not None else ServerLimits()
    api_socket = listen(host, port, "the ART API")
    try:
        inference_socket = listen(host, inference_port, "the inference server", "--inference-port")
    except BaseException:
        api_socket.close()
        raise
    inference_url = _url(host, inference_socket) + "/v1"
    clients: list[httpx.AsyncClient] = []
    service = ArtService(
        backend,
        base_path=base_path,
        inference_base_url=lambda: inference_url,
        allowed_base_models=allowed_base_models,
    )
    inference_keys = InferenceKeys(keys)
    api_app = create_api_app(service, keys=keys, inference_keys=inference_keys, limits=limits)
    inference_app = create_inference_app(
        service, keys=inference_keys, limits=limits, http=lambda: clients[0]
    )

    def config(app: Any, **extra: Any) -> Any:
        return uvicorn.Config(
            app,
            http=head_capped_protocol(limits.max_header_bytes, error_shape=extra.pop("shape")),
            h11_max_incomplete_event_size=limits.max_header_bytes,
            log_level=log_level,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=5,
            timeout_keep_alive=limits.keep_alive_s,
            **extra,
        )

    # Neither server takes the signals: both stop together, and the service (running jobs,
    # the backend) is closed before this coroutine returns.
    api_server = _signal_free(config(api_app, shape=art_error))
    inference_server = _signal_free(config(inference_app, shape=None))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    handled = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop.set)
            handled.append(signum)
    clients.append(httpx.AsyncClient(timeout=None))
    inference_task = asyncio.create_task(
        inference_server.serve(sockets=[inference_socket]), name="art-inference"
    )
    api_task = asyncio.create_task(api_server.serve(sockets=[api_socket]), name="art-api")
    try:
        while not (api_server.started and inference_server.started):
            for task in (api_task, inference_task):
                if task.done():
                    await task
                    raise InvalidInputError("the ART server stopped while starting")
            await asyncio.sleep(0.01)
        if on_ready is not None:
            on_ready(_url(host, api_socket), inference_url)
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({api_task, inference_task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)
        api_server.should_exit = True
        inference_server.should_exit = True
        # Updates end first (rolled back), so their streams end now, not at the servers'
        # graceful-shutdown timeout.
        await service.stop_jobs()
        for task in (api_task, inference_task):
            with contextlib.suppress(BaseException):
                await task
        try:
            await service.close()
        finally:
            await clients.pop().aclose()
            api_socket.close()
            inference_socket.close()


def run_art(opts: ServeOptions) -> None:
    """Serve as `opts` say (protocol "art"), until SIGINT/SIGTERM. A keys file or backend that
    cannot be loaded exits 1, one line."""
    try:
        keys = KeyRing.from_file(opts.keys) if opts.keys is not None else None
    except ArthexError as exc:
        sys.exit(f"arthex serve: {exc}")
    backend = backend_named(opts.backend)
    if not is_loopback(opts.host):
        logger.warning(
            "listening on %s with --insecure-bind: ART's protocol carries no credentials%s",
            opts.host,
            "" if keys is not None else "; anyone who reaches the port can train this server",
        )
    base_path = Path(opts.art_base_path)

    def ready(api_url: str, inference_url: str) -> None:
        print(
            f"arthex serve: listening on {api_url} (ART protocol; inference on {inference_url}, "
            f"backend {type(backend).__name__}, base path {base_path.resolve()})",
            flush=True,
        )

    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(
                serve_art(
                    backend,
                    base_path=base_path,
                    host=opts.host,
                    port=opts.listen_port,
                    inference_port=opts.art_inference_port,
                    keys=keys,
                    limits=opts.limits,
                    allowed_base_models=(
                        frozenset(opts.allow_base_model) if opts.allow_base_model else None
                    ),
                    on_ready=ready,
                    log_level=opts.log_level,
                )
            )
    except ArthexError as exc:  # a port already taken, a backend that cannot start: one line
        sys.exit(f"arthex serve: {exc}")
    finally:
        # the backend is closed on every way out, also when the server never started
        with contextlib.suppress(Exception):
            asyncio.run(backend.close())
