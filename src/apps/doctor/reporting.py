"""Where metrics would be reported: wandb's mode, its credentials, and its host.

Offline and disabled modes say so without touching the network. Online, the credentials are
looked up as the wandb mirror decides whether to run (`wandb_reporter.has_credentials`:
WANDB_API_KEY, an identity token file, the netrc entry of WANDB_BASE_URL's host), and with
them the host is reached with one TCP connection (a few seconds at most); the entity and
project named by WANDB_ENTITY / WANDB_PROJECT are shown, not queried.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

from .check import Check, ok, warn

DEFAULT_BASE_URL = "https://api.wandb.ai"
PROBE_TIMEOUT_S = 3.0


def check_wandb(installed: bool | None = None) -> Check:
    env = os.environ
    if installed is None:
        from .versions import installed_version

        installed = installed_version("wandb") is not None
    mode = (env.get("WANDB_MODE") or "").strip().lower()
    if mode == "disabled":
        return ok("wandb", "disabled (WANDB_MODE=disabled): the history is the only record")
    if not installed:
        return ok("wandb", "not installed: runs report to history.jsonl only")
    if mode in ("offline", "dryrun"):
        return ok(
            "wandb",
            f"offline (WANDB_MODE={mode}): runs are written under the wandb folder; "
            "`wandb sync` uploads them later",
        )
    from ...adapters.wandb_reporter import has_credentials

    base_url = env.get("WANDB_BASE_URL") or DEFAULT_BASE_URL
    parts = urlsplit(base_url)
    host = parts.hostname or base_url
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if not has_credentials():
        return ok(
            "wandb",
            f"no credentials for {host}: runs report to history.jsonl only (wandb login, "
            "WANDB_API_KEY or WANDB_MODE=offline to mirror them to wandb)",
        )
    source = next(
        (name for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE") if env.get(name)),
        "the netrc file",
    )
    where = ", ".join(
        f"{name}={env[name]}" for name in ("WANDB_ENTITY", "WANDB_PROJECT") if env.get(name)
    )
    target = f" ({where})" if where else " (project: the model's project)"
    problem = _unreachable(host, port)
    if problem is not None:
        return warn(
            "wandb",
            f"online with credentials from {source}, but {problem}",
            "check the network or WANDB_BASE_URL; or WANDB_MODE=offline and `wandb sync` later",
        )
    return ok("wandb", f"online: credentials from {source}, {host}:{port} reachable{target}")


def _unreachable(host: str, port: int) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return None
    except OSError as error:
        return f"{host}:{port} cannot be reached ({error.strerror or type(error).__name__})"
