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
sessions/{id}/finish; GET healthz, get_server_capabilities, samplers/{id}, training_runs,
checkpoints, training_runs/{id}, training_runs/{id}/checkpoints,
training_runs/{id}/checkpoints/external_weights/{name}/external_weights_urls; PUT
training_runs/{id}/checkpoints/{kind}/{name}/ttl (a TTL expires a checkpoint, store.py); DELETE
training_runs/{id}/checkpoints/{kind}/{name}; and GET /files/... (signed URLs, external.py).

It is `arthex serve --protocol tinker` (docs/backends/tinker-server.md) with test settings:
the same ASGI app and service, served by uvicorn on a thread of this process, with one open
tenant (any key of the SDK's shape, or only `api_key`), no rate limit, no quotas and no audit
log.

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
import logging
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ...apps.server.tinker_protocol.errors import UserError
from ...core.errors import BackendError, InvalidInputError, MissingExtraError
from .keys import OpenKeys, check_api_key

if TYPE_CHECKING:
    from ...apps.server.tinker_protocol.external import ExternalWeights
    from ...apps.server.tinker_protocol.service import TinkerService

__all__ = ["TinkerEmulator", "main"]

logger = logging.getLogger(__name__)
JOIN_TIMEOUT_S = 10.0  # for the server's thread to end once its work is failed
GRACEFUL_S = 2  # open connections get this long to finish at stop (long polls have ended)


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
        check_api_key(api_key)
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
        self._service: TinkerService | None = None
        self._server: Any = None  # uvicorn.Server
        self._url: str | None = None
        self._socket: socket.socket | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        if self._url is None:
            raise BackendError("the tinker emulator is not started; call start()")
        return self._url

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
        if self._url is not None:
            return self._url
        try:
            return self._start()
        except BaseException:
            self.stop()  # a failed start leaves nothing: threads, temp folder, torch's setting
            raise

    def _start(self) -> str:
        try:
            import peft  # noqa: F401
            import torch
            import transformers  # noqa: F401
            import uvicorn  # noqa: F401
            from tinker.proto import tinker_public_pb2  # noqa: F401
        except ImportError as exc:
            extra = "server" if exc.name in ("uvicorn", "starlette") else "tinker"
            raise MissingExtraError(exc.name or extra, extra) from exc
        from ...apps.listen import listen
        from ...apps.server.limits import ServerLimits
        from ...apps.server.tinker_protocol.app import create_tinker_app, tinker_error
        from ...apps.server.tinker_protocol.base_model import BaseModel
        from ...apps.server.tinker_protocol.served import ServedModels
        from ...apps.server.tinker_protocol.service import TinkerService
        from ...apps.server.uvicorn_serving import uvicorn_server

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
        service = self._service = TinkerService(
            models, root, client_config=self.client_config, long_poll_s=self.long_poll_s
        )
        # test settings: no rate limit, the largest bodies, no quotas, no audit log
        limits = ServerLimits(rate_per_s=0, max_body_bytes=4096 * 1024 * 1024)
        app = create_tinker_app(service, keys=OpenKeys(self.api_key), limits=limits)
        sock = self._socket = listen(self.host, self.port, "the tinker emulator")
        server = self._server = uvicorn_server(
            app, limits=limits, log_level="warning", error_shape=tinker_error, graceful_s=GRACEFUL_S
        )
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="tinker-emulator-http", daemon=True
        )
        self._thread.start()
        while not server.started:
            if not self._thread.is_alive():
                self.stop()
                raise BackendError("the tinker emulator stopped while starting")
            time.sleep(0.01)
        host, port = sock.getsockname()[:2]
        self._url = f"http://{host!s}:{port}"
        atexit.register(self.stop)
        return self._url

    def stop(self) -> None:
        """Fail what is still pending (long polls return), stop serving, end the open
        connections and join the server's threads, and drop the temp state folder."""
        atexit.unregister(self.stop)
        self._url = None
        if self._service is not None:
            self._service.close()  # later requests get a 503
        server, self._server = self._server, None
        if server is not None:
            server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=JOIN_TIMEOUT_S + GRACEFUL_S)
            if self._thread.is_alive():
                logger.warning("tinker emulator: the server thread did not end at stop")
            self._thread = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
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
