"""`arthex serve --protocol tinker`: the Tinker API, for the unmodified tinker SDK.

    arthex serve --protocol tinker --base-model ./my-model --base-model Qwen/Qwen3-0.6B \\
        --keys keys.txt --state-dir ./tinker-state
    TINKER_BASE_URL=http://127.0.0.1:8000 TINKER_API_KEY=tml-... python train.py

Each `--base-model` is loaded once and served under the name given; every training client
gets its own LoRA adapter and optimizer over it. Keys are the server's (`tenant:key` lines,
keys.py), and since the SDK refuses a key that does not start with `tml-`, a tenant's keys
must. Runs, checkpoints and sampler weights live under `--state-dir/runs/`, the audit log
at `--state-dir/audit.jsonl`. `$ARTHEX_TINKER_BATCH_WINDOW_MS` sets how long a
forward_backward waits for other active runs' requests to share its pass (futures.py; 0: never).
See docs/backends/tinker-server.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from ....core.errors import ArthexError, InvalidInputError, MissingExtraError, require_extra
from .. import options
from ..audit import AuditLog
from ..guard import KeyCheck
from ..keys import KeyRing
from ..limits import ServerLimits
from ..options import ServeOptions, is_loopback
from ..uvicorn_serving import serve_app
from .app import create_tinker_app, tinker_error
from .errors import UserError
from .futures import BATCH_WINDOW_S
from .quota import TinkerQuotas
from .served import ServedModels
from .service import TinkerService

__all__ = ["LONG_POLL_S", "load_models", "run_tinker", "serve_tinker", "window_from_env"]

logger = logging.getLogger("arthex.tinker_protocol")

LONG_POLL_S = 10.0  # how long a retrieve_future waits before answering try_again
TINKER_PACKAGES = ("torch", "transformers", "peft", "safetensors", "tinker")
BATCH_WINDOW_ENV = "ARTHEX_TINKER_BATCH_WINDOW_MS"


def window_from_env(environ: Mapping[str, str]) -> float:
    """The batch window `environ` sets, in seconds (unset: BATCH_WINDOW_S); InvalidInputError
    for one that is not a number of milliseconds from 0 to 1000."""
    text = environ.get(BATCH_WINDOW_ENV, "").strip()
    if not text:
        return BATCH_WINDOW_S
    try:
        window_ms = float(text)
    except ValueError:
        window_ms = math.nan
    if not 0 <= window_ms <= 1000:
        raise InvalidInputError(
            f"${BATCH_WINDOW_ENV} must be milliseconds from 0 to 1000 (0: off), got {text!r}"
        )
    return window_ms / 1000


def load_models(folders: list[tuple[str, str]], *, device: str = "cpu") -> ServedModels:
    """(name, folder) pairs loaded once each, served under the name (and the folder's path).
    InvalidInputError naming a model that cannot be loaded."""
    from .base_model import BaseModel

    models = ServedModels()
    for name, folder in folders:
        try:
            base = BaseModel(folder, device=device)
        except UserError as exc:
            raise InvalidInputError(str(exc)) from exc
        aliases = {folder, str(Path(folder).resolve())} - {name}
        models.add(name, base, aliases)
    return models


async def serve_tinker(
    models: ServedModels,
    *,
    keys: KeyCheck | None,
    state_dir: str | Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: ServerLimits | None = None,
    admin_keys: KeyRing | None = None,
    audit: AuditLog | None = None,
    on_ready: Callable[[str], None] | None = None,
    log_level: str = "warning",
    batch_window_s: float = BATCH_WINDOW_S,
) -> None:
    """Serve until SIGINT/SIGTERM (or cancellation); pending promises fail at shutdown."""
    limits = limits if limits is not None else ServerLimits()
    root = Path(state_dir)
    await asyncio.to_thread(root.mkdir, parents=True, exist_ok=True)
    service = TinkerService(
        models,
        root,
        client_config={},
        long_poll_s=LONG_POLL_S,
        quotas=lambda store: TinkerQuotas(limits, store),
        batch_window_s=batch_window_s,
    )
    app = create_tinker_app(
        service, keys=keys, limits=limits, audit=audit, admin_keys=admin_keys, state_dir=root
    )
    await serve_app(
        app,
        host=host,
        port=port,
        limits=limits,
        on_ready=on_ready,
        log_level=log_level,
        what="the Tinker server",
        error_shape=tinker_error,
    )


def run_tinker(opts: ServeOptions) -> None:
    """Serve as `opts` say (protocol "tinker"), until SIGINT/SIGTERM. Keys, a missing extra
    or a model that cannot be loaded exit 1, one line."""
    try:
        require_extra("tinker", *TINKER_PACKAGES)
        window_s = window_from_env(os.environ)
        keys = KeyRing.load(opts.keys)
        admin_keys = options.admin_keys_of(opts)
        if admin_keys is not None and admin_keys.overlaps(keys):
            raise InvalidInputError("a key is both an admin key and a tenant key")
        names = opts.base_model or ()
        folders = [(name, options.base_model_folder(name)) for name in names]
        models = load_models(folders)
    except (ArthexError, MissingExtraError) as exc:
        sys.exit(f"arthex serve: {exc}")
    if not is_loopback(opts.host):
        logger.warning(
            "listening on %s: API keys travel in clear text; put a TLS proxy in front", opts.host
        )
    state = Path(opts.state_dir).resolve()

    def ready(url: str) -> None:
        served = ", ".join(repr(name) for name in models.names)
        print(
            f"arthex serve: listening on {url} (Tinker API; base models {served}; state {state})",
            flush=True,
        )

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            serve_tinker(
                models,
                keys=keys,
                state_dir=opts.state_dir,
                host=opts.host,
                port=opts.listen_port,
                limits=opts.limits,
                admin_keys=admin_keys,
                audit=options.audit_of(opts),
                on_ready=ready,
                log_level=opts.log_level,
                batch_window_s=window_s,
            )
        )
