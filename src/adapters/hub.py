"""Where a base model's files come from, decided before transformers is asked to load them.

A base model is a local folder or a Hugging Face hub id. For a hub id, transformers asks the
hub (and retries a dead connection for about 50 seconds, printing every retry) even when the
files are in the local cache or cannot be fetched at all. So, first:

- a local folder: loaded from disk;
- `HF_HUB_OFFLINE` set, or the hub's host unreachable (one connection attempt, a few seconds at
  most; none at all with `HF_HUB_OFFLINE`): loaded from the cache's snapshot folder, or, when
  the cache does not hold it, refused at once in one line saying what to do;
- otherwise: loaded as transformers does (the cache, kept fresh from the hub).
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from urllib.parse import urlsplit

from ..core.errors import InvalidInputError

PROBE_TIMEOUT_S = 3.0
PROBE_KEPT_S = 60.0  # a run's loads (trainer, engine, tokenizer) share one probe
_probes: dict[str, tuple[float, str | None]] = {}
_probes_lock = threading.Lock()
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def resolve_base_model(base_model: str) -> str:
    """What to hand transformers for `base_model` (see the module docstring): the id or path as
    given, or the cache's snapshot folder of a hub id when the hub must not be asked (a folder
    makes transformers ask nothing; `local_files_only` still lets it ask for an adapter config).
    InvalidInputError when it is a hub id that can be neither found here nor fetched."""
    if os.path.isdir(base_model) or not _HUB_ID.match(base_model):
        return base_model  # a folder, or a path transformers reports on itself
    from huggingface_hub import constants, try_to_load_from_cache

    offline = bool(constants.HF_HUB_OFFLINE)
    unreachable = "HF_HUB_OFFLINE is set" if offline else _unreachable(constants.ENDPOINT)
    if unreachable is None:
        return base_model
    cached = try_to_load_from_cache(base_model, "config.json")
    if isinstance(cached, str):
        return os.path.dirname(cached)
    raise InvalidInputError(
        f"base model {base_model!r} is neither a folder here nor in the Hugging Face cache "
        f"({constants.HF_HUB_CACHE}), and {unreachable}: download it where there is network "
        f"(hf download {base_model}) or pass the path of a local model folder"
    )


def _unreachable(endpoint: str) -> str | None:
    """Why the hub at `endpoint` cannot be reached, or None when a connection opens (the
    answer is kept for PROBE_KEPT_S)."""
    with _probes_lock:
        kept = _probes.get(endpoint)
        if kept is not None and time.monotonic() - kept[0] < PROBE_KEPT_S:
            return kept[1]
    answer = _probe(endpoint)
    with _probes_lock:
        _probes[endpoint] = (time.monotonic(), answer)
    return answer


def _probe(endpoint: str) -> str | None:
    import urllib.request

    if urllib.request.getproxies():  # the hub is reached through a proxy: transformers knows
        return None
    parts = urlsplit(endpoint)
    host = parts.hostname or endpoint
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return None
    except OSError as error:
        reason = error.strerror or type(error).__name__
        return f"{host}:{port} cannot be reached ({reason})"


def one_line(error: BaseException) -> str:
    """An error's message on one line, without its closing period (the caller's sentence goes
    on after it)."""
    return " ".join(str(error).split()).rstrip(".")
