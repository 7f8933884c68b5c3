"""A local tinker emulator: the part of the Tinker service that the pinned SDK (0.38.0) uses for
RL training and sampling, on loopback, backed by real torch training of a small causal LM.

The unmodified SDK trains against it, which is what makes it useful beyond our own tests: point a
Tinker setup at it to try it offline.

    python -m arthex.emulators.tinker --base-model ./tiny --port 8123
    TINKER_BASE_URL=http://127.0.0.1:8123 TINKER_API_KEY=tml-local python my_script.py

In code: `with TinkerEmulator(base_model_dir) as emulator: ... emulator.base_url ...`.

Endpoints (all under /api/v1): POST client/config, client/dynamic_config, create_session,
session_heartbeat, telemetry, create_model, get_info, forward_backward (protobuf in and out),
optim_step, save_weights, save_weights_for_sampler, save_weights_external, load_weights,
create_sampling_session, asample (protobuf out), retrieve_future, cancel_future,
sessions/{id}/finish; GET healthz, get_server_capabilities, samplers/{id}, training_runs/{id},
training_runs/{id}/checkpoints,
training_runs/{id}/checkpoints/external_weights/{name}/external_weights_urls; PUT
training_runs/{id}/checkpoints/{kind}/{name}/ttl (a TTL expires a checkpoint, store.py); DELETE
training_runs/{id}/checkpoints/{kind}/{name}; and GET /files/... (signed URLs, external.py).

Behaviour worth knowing: one base model per emulator (accepted under its directory path and an
optional `model_name`); LoRA training only, AdamW only; losses cross_entropy,
importance_sampling, ppo, cispo and dro (see `losses`); training, saving and sampling
requests are promises resolved through `retrieve_future`, and the requests of one training run
run in `seq_id` order, like the service's. Checkpoints live under `state_dir` (a temp folder by
default), so an emulator restarted on the same folder still lists, serves and resumes them; live
training runs do not survive a restart, as a service session would not.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import secrets
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ...apps.server.tinker_protocol.errors import FILES_PREFIX, HttpError, UserError
from ...apps.server.tinker_protocol.wire import Reply
from ...core.errors import BackendError, InvalidInputError, MissingExtraError

if TYPE_CHECKING:
    from ...apps.server.tinker_protocol.external import ExternalWeights
    from ...apps.server.tinker_protocol.service import TinkerService

__all__ = ["TinkerEmulator", "main"]

logger = logging.getLogger(__name__)
JOIN_TIMEOUT_S = 10.0  # for a thread to end once its work is failed and its socket shut


class TinkerEmulator:
    """Serve the tinker protocol on `http://{host}:{port}` for the model in `base_model`.

    `api_key=None` accepts any key of the SDK's shape (`tml-...`); a value accepts only itself.
    `state_dir` keeps the checkpoints (a temp folder, removed at `stop`, by default).
    `client_config` is what `POST client/config` answers (server feature flags; `{}` keeps the
    SDK's defaults). `long_poll_s` is how long `retrieve_future` waits before `try_again`.
    `torch_threads` sets torch's (process-wide) intra-op thread count while the emulator runs:
    on a small shared CPU, 1 thread is many times faster for a tiny model than several
    threads fighting over the cores.
    """

    def __init__(
        self,
        base_model: str,
        *,
        model_name: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        state_dir: str | None = None,
        device: str = "cpu",
        client_config: Mapping[str, Any] | None = None,
        long_poll_s: float = 10.0,
        torch_threads: int | None = None,
    ) -> None:
        if api_key is not None and not api_key.startswith(("tml-", "eyJ")):
            raise InvalidInputError(
                f"api_key must start with 'tml-' as the tinker SDK requires, got {api_key[:4]!r}..."
            )
        self.base_model_path = str(base_model)
        self.model_name = model_name or self.base_model_path
        self.host = host
        self.port = port
        self.api_key = api_key
        self.device = device
        self.client_config = dict(client_config or {})
        self.long_poll_s = long_poll_s
        self.torch_threads = torch_threads
        self._state_dir = state_dir
        self._temp_root: Path | None = None
        self._previous_threads: int | None = None
        self._stopping = False  # requests on connections still open get a 503
        self._service: TinkerService | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise BackendError("the tinker emulator is not started; call start()")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def advance_clock(self, seconds: float) -> None:
        """Run the emulator's clock `seconds` ahead: a checkpoint whose TTL (set at its save or
        by `set_checkpoint_ttl_from_tinker_path`) has then passed is gone, as the service
        expires it."""
        if self._service is None:
            raise BackendError("the tinker emulator is not started; call start()")
        self._service.store.clock_offset_s += seconds

    @property
    def external_weights(self) -> ExternalWeights:
        """Its external weights' signed URLs: `url_ttl_s`, and `faults` for tests."""
        if self._service is None:
            raise BackendError("the tinker emulator is not started; call start()")
        return self._service.external

    @property
    def route_counts(self) -> Counter[str]:
        """Requests served so far, by `"METHOD route"` (what an SDK version really uses)."""
        return self._service.route_counts if self._service is not None else Counter()

    def start(self) -> str:
        """Load the base model, bind, serve on a daemon thread; return the base URL. An
        emulator never stopped is stopped at interpreter exit."""
        if self._server is not None:
            return self.base_url
        try:
            import peft  # noqa: F401
            import torch
            import transformers  # noqa: F401
            from tinker.proto import tinker_public_pb2  # noqa: F401
        except ImportError as exc:
            raise MissingExtraError(exc.name or "tinker", "tinker") from exc
        from ...apps.server.tinker_protocol.base_model import BaseModel
        from ...apps.server.tinker_protocol.served import ServedModels
        from ...apps.server.tinker_protocol.service import TinkerService

        if self.torch_threads is not None:
            self._previous_threads = torch.get_num_threads()
            torch.set_num_threads(self.torch_threads)
        try:
            base = BaseModel(self.base_model_path, device=self.device)
        except UserError as exc:
            raise InvalidInputError(str(exc)) from exc
        if self._state_dir is None:
            root = self._temp_root = Path(tempfile.mkdtemp(prefix="tinker-emulator-"))
        else:
            root = Path(self._state_dir)
            root.mkdir(parents=True, exist_ok=True)
        models = ServedModels()
        aliases = {self.base_model_path, str(Path(self.base_model_path).resolve())}
        models.add(self.model_name, base, aliases - {self.model_name})
        self._stopping = False
        self._service = TinkerService(
            models,
            root,
            client_config=self.client_config,
            long_poll_s=self.long_poll_s,
        )
        server = _Server((self.host, self.port), self)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="tinker-emulator-http", daemon=True
        )
        self._thread.start()
        atexit.register(self.stop)
        return self.base_url

    def stop(self) -> None:
        """Stop serving, fail what is still pending, end every open connection and join the
        threads that served them, and drop the temp state folder."""
        atexit.unregister(self.stop)
        self._stopping = True
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()  # no new connections
        if self._thread is not None:
            self._thread.join(timeout=JOIN_TIMEOUT_S)
            self._thread = None
        if self._service is not None:
            self._service.close()  # long polls return, compute work ends
        if server is not None:
            server.end_connections()
            server.server_close()
        if self._temp_root is not None:
            shutil.rmtree(self._temp_root, ignore_errors=True)
            self._temp_root = None
        if self._previous_threads is not None:
            import torch

            torch.set_num_threads(self._previous_threads)
            self._previous_threads = None

    def __enter__(self) -> TinkerEmulator:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def authorized(self, key: str | None) -> bool:
        if key is None:
            return False
        if self.api_key is not None:
            return secrets.compare_digest(key, self.api_key)
        return key.startswith(("tml-", "eyJ"))

    def handle(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> Reply:
        if self._service is None or self._stopping:
            raise HttpError(503, "the tinker emulator is stopping")
        return self._service.handle(method, target, headers, body)


class _Server(ThreadingHTTPServer):
    """Serves each connection on a thread of its own and keeps track of them, so `stop` can
    end the connections (an SDK keeps its connections open between requests) and join their
    threads. The threads are daemons only so that an emulator never stopped cannot hold up
    interpreter exit before `stop` runs at exit."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], emulator: TinkerEmulator) -> None:
        super().__init__(address, _Handler)
        self.emulator = emulator
        self._lock = threading.Lock()
        self._open: dict[threading.Thread, socket.socket] = {}

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name="tinker-emulator-request",
            daemon=True,
        )
        with self._lock:
            self._open[thread] = request
        thread.start()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._open.pop(threading.current_thread(), None)

    def end_connections(self) -> None:
        """Shut every open connection down (its thread's next read ends) and join the
        threads. Call after `shutdown`, so that no connection opens meanwhile."""
        with self._lock:
            serving = list(self._open.items())
        for _, connection in serving:
            with contextlib.suppress(OSError):  # the client closed it already
                connection.shutdown(socket.SHUT_RDWR)
        for thread, _ in serving:
            thread.join(timeout=JOIN_TIMEOUT_S)
            if thread.is_alive():
                logger.warning("tinker emulator: a request thread did not end at stop")

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a connection ended by `stop` mid-request; anything a request raises is answered
        # with a 500 by the handler and never gets here
        logger.debug("tinker emulator: connection from %s ended", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "tinker-emulator"

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        emulator: TinkerEmulator = self.server.emulator  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            signed = method == "GET" and self.path.startswith(FILES_PREFIX)  # its own key
            if not signed and not emulator.authorized(headers.get("x-api-key")):
                raise HttpError(401, "missing or wrong X-API-Key (the SDK sends TINKER_API_KEY)")
            reply = emulator.handle(method, self.path, headers, body)
        except HttpError as exc:
            reply = Reply.json({"detail": str(exc)}, exc.status)
        except Exception as exc:
            logger.exception("tinker emulator: %s %s failed", method, self.path)
            reply = Reply.json({"detail": f"{type(exc).__name__}: {exc}"}, 500)
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(reply.body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("tinker emulator: " + format, *args)


def main(argv: list[str] | None = None) -> None:
    """`python -m arthex.emulators.tinker --base-model DIR --port N`."""
    parser = argparse.ArgumentParser(
        prog="python -m arthex.emulators.tinker",
        description="Serve a local tinker emulator that trains a small Hugging Face model.",
    )
    parser.add_argument("--base-model", required=True, help="a Hugging Face causal LM directory")
    parser.add_argument("--model-name", default=None, help="the name clients use for it")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", default=None, help="accept only this key (tml-...)")
    parser.add_argument("--state-dir", default=None, help="keep checkpoints here")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = parser.parse_args(argv)
    emulator = TinkerEmulator(
        args.base_model,
        model_name=args.model_name,
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        state_dir=args.state_dir,
        device=args.device,
        torch_threads=args.threads,
    )
    signal.signal(signal.SIGTERM, _exit_on_signal)  # `kill` stops it as cleanly as Ctrl-C
    url = emulator.start()
    print(f"tinker emulator serving {emulator.model_name!r} at {url}", flush=True)
    print(
        f"  export TINKER_BASE_URL={url} TINKER_API_KEY={args.api_key or 'tml-local'}", flush=True
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        emulator.stop()


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(0)


if __name__ == "__main__":
    main()
