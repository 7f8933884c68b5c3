"""`arthex serve`'s settings: their values and defaults, their checks, and what they build.

The command line itself is `arthex serve` (`arthex.apps.cli.serve`), which `python -m
arthex.apps.server` runs too: one definition of the options, whose values land here. Every
value is checked before anything starts or is created; a bad one ends the command with one
line naming the option and what it takes (exit status 2), never a traceback and never a
server that starts and then refuses every request. The limits come from ServerLimits, whose
bounds (`limits.BOUNDS`) name their options.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Any

import attrs

from ...core.errors import InvalidInputError
from .audit import DEFAULT_AUDIT_BACKUPS, DEFAULT_AUDIT_MAX_BYTES, AuditLog
from .keys import KeyRing
from .limits import ServerLimits

__all__ = [
    "ADMIN_KEYS_ENV",
    "ART_BASE_PATH",
    "ART_INFERENCE_PORT",
    "ART_PORT",
    "DEFAULT_PORT",
    "LIMIT_HELP",
    "LOG_LEVELS",
    "PROTOCOLS",
    "ServeOptions",
    "admin_keys_of",
    "audit_of",
    "base_model_folder",
    "check_paths",
    "integer",
    "is_loopback",
    "number",
    "port",
]

DEFAULT_PORT = 8000
ART_PORT = 7999  # `art run`'s port
ART_INFERENCE_PORT = 8000  # where ART (and NAT's health check) expects the inference server
ART_BASE_PATH = ".art"  # ART's LocalBackend default
PROTOCOLS = ("arthex", "art", "tinker")
LOOPBACK_NAMES = ("localhost",)
ADMIN_KEYS_ENV = "ARTHEX_SERVER_ADMIN_KEYS"
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
AUDIT_OFF = "off"

LIMIT_HELP = {
    "max_body_bytes": "largest request body; 413 above it",
    "spool_threshold_bytes": "bodies above it wait on disk, not in memory",
    "max_header_bytes": "largest request line plus headers; 431 above it",
    "max_headers": "most request headers; 431 above it",
    "rate_per_s": "requests a second per API key, 0 = off; 429 with Retry-After above it",
    "rate_burst": "requests one key may send at once before the rate applies",
    "max_jobs_per_tenant": "a tenant's training jobs at once, 0 = no limit; 429 above it",
    "max_models_per_tenant": "models a tenant may register, 0 = no limit; 429 above it",
    "max_checkpoint_bytes_per_tenant": "bytes of checkpoints per tenant, 0 = no limit; 507",
    "max_running_jobs": "jobs training at once on this server (more wait), 0 = no limit",
    "lease_ttl_s": "seconds a trainer's lease on a model outlives its last call",
    "job_retention_s": "seconds a finished job's events are kept once read",
    "keep_alive_s": "seconds an idle connection stays open (longer than clients keep theirs)",
}


def integer(text: str) -> int:
    """A whole number in ASCII digits (`int` would also take other scripts' digits)."""
    if re.fullmatch(r"-?[0-9]{1,19}", text) is None:
        raise InvalidInputError(f"expected a whole number, got {text!r}")
    return int(text)


def number(text: str) -> float:
    if re.fullmatch(r"-?[0-9]{1,19}(\.[0-9]{1,9})?", text) is None:
        raise InvalidInputError(f"expected a number such as 2 or 0.5, got {text!r}")
    return float(text)


def port(text: str) -> int:
    value = integer(text)
    if not 0 <= value <= 65535:
        raise InvalidInputError(f"a port is from 0 to 65535, got {value}")
    return value


def _lower(text: str) -> str:
    return text.lower()


def _log_level(_instance: object, _attribute: object, level: str) -> None:
    if level not in LOG_LEVELS:
        choices = ", ".join(LOG_LEVELS)
        raise InvalidInputError(f"--log-level must be one of {choices}, got {level!r}")


def _protocol(_instance: object, _attribute: object, protocol: str) -> None:
    if protocol not in PROTOCOLS:
        choices = ", ".join(PROTOCOLS)
        raise InvalidInputError(f"--protocol must be one of {choices}, got {protocol!r}")


def _optional_port(_instance: object, attribute: Any, value: int | None) -> None:
    if value is not None and not 0 <= value <= 65535:
        option = "--" + attribute.name.replace("_", "-")
        raise InvalidInputError(f"{option} is a port from 0 to 65535, got {value}")


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (127.0.0.0/8, ::1) or `localhost`."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _audit_max_bytes(_instance: object, _attribute: object, value: int) -> None:
    if not 4096 <= value <= 2**40:
        raise InvalidInputError(f"--audit-max-bytes must be from 4096 to {2**40}, got {value}")


def _audit_backups(_instance: object, _attribute: object, value: int) -> None:
    if not 0 <= value <= 1000:
        raise InvalidInputError(f"--audit-backups must be from 0 to 1000, got {value}")


@attrs.frozen
class ServeOptions:
    """What `arthex serve` was asked to do; the defaults are the command's defaults.

    `keys` None reads the tenant keys from `$ARTHEX_SERVER_KEYS`; `admin_keys` None reads
    `$ARTHEX_SERVER_ADMIN_KEYS` (none: /metrics closed); `audit_log` None writes
    `{state_dir}/audit.jsonl` and "off" none; `allow_base_model` None allows any.

    `protocol` "art" serves ART's remote-backend API (see `art_protocol`): `port` None is
    then ART's 7999 (else 8000), `inference_port` None ART's 8000, `base_path` None ART's
    `.art`; `keys` None leaves that API open (ART's protocol carries no key), so it listens
    on loopback only unless `insecure_bind`.

    `protocol` "tinker" serves the Tinker API (see `tinker_protocol`) on the `base_model`
    models (folders or hub ids in the local cache, each served under the name given), its
    runs and checkpoints under `state_dir`, with the keys, limits and audit log above."""

    backend: str = "local"
    host: str = "127.0.0.1"
    port: int | None = attrs.field(default=None, validator=_optional_port)
    protocol: str = attrs.field(default="arthex", converter=_lower, validator=_protocol)
    inference_port: int | None = attrs.field(default=None, validator=_optional_port)
    base_path: str | None = None
    insecure_bind: bool = False
    keys: str | None = None
    state_dir: str = ".arthex-server"
    allow_base_model: tuple[str, ...] | None = None
    base_model: tuple[str, ...] | None = None
    log_level: str = attrs.field(default="warning", converter=_lower, validator=_log_level)
    admin_keys: str | None = None
    audit_log: str | None = None
    audit_max_bytes: int = attrs.field(default=DEFAULT_AUDIT_MAX_BYTES, validator=_audit_max_bytes)
    audit_backups: int = attrs.field(default=DEFAULT_AUDIT_BACKUPS, validator=_audit_backups)
    limits: ServerLimits = attrs.field(factory=ServerLimits)

    def __attrs_post_init__(self) -> None:
        if self.protocol == "art":
            if not is_loopback(self.host) and not self.insecure_bind:
                raise InvalidInputError(
                    f"--host {self.host!r} is not a loopback address, and ART's protocol "
                    "carries no credentials: anyone who reaches the port could train and "
                    "delete checkpoints. Bind 127.0.0.1 (tunnel to it), or pass --insecure-bind "
                    "(and --keys for clients that can send a key) to listen there anyway"
                )
            # The hosted API's own state and logs: ART's protocol keeps its runs under
            # --base-path and has no audit log or metrics endpoint, so these would do nothing.
            plain = ServeOptions()
            for name, attribute in (
                ("--state-dir", "state_dir"),
                ("--admin-keys", "admin_keys"),
                ("--audit-log", "audit_log"),
                ("--audit-max-bytes", "audit_max_bytes"),
                ("--audit-backups", "audit_backups"),
            ):
                if getattr(self, attribute) != getattr(plain, attribute):
                    raise InvalidInputError(
                        f"{name} is not an option of --protocol art (its runs and checkpoints "
                        "live under --base-path; it keeps no audit log or metrics endpoint)"
                    )
            return
        for name, value in (
            ("--inference-port", self.inference_port),
            ("--base-path", self.base_path),
        ):
            if value is not None:
                raise InvalidInputError(f"{name} is an option of --protocol art")
        if self.insecure_bind:
            raise InvalidInputError("--insecure-bind is an option of --protocol art")
        if self.protocol != "tinker":
            if self.base_model:
                raise InvalidInputError("--base-model is an option of --protocol tinker")
            return
        if not self.base_model:
            raise InvalidInputError(
                "--protocol tinker needs --base-model: a model folder or a hub id in the local "
                "cache (repeat it to serve several)"
            )
        if self.allow_base_model is not None:
            raise InvalidInputError(
                "--allow-base-model is not an option of --protocol tinker; it serves exactly "
                "its --base-model models"
            )
        if self.backend != "local":
            raise InvalidInputError(
                "--backend is not an option of --protocol tinker (it trains and samples its "
                "--base-model models itself)"
            )
        repeated = sorted({name for name in self.base_model if self.base_model.count(name) > 1})
        if repeated:
            raise InvalidInputError(f"--base-model {repeated[0]!r} is given twice")

    @property
    def listen_port(self) -> int:
        """The API's port: the given one, else the protocol's default."""
        if self.port is not None:
            return self.port
        return ART_PORT if self.protocol == "art" else DEFAULT_PORT

    @property
    def art_inference_port(self) -> int:
        return self.inference_port if self.inference_port is not None else ART_INFERENCE_PORT

    @property
    def art_base_path(self) -> str:
        return self.base_path if self.base_path is not None else ART_BASE_PATH


def _creatable_directory(path: Path, option: str, value: str) -> None:
    """Refuse, without creating anything, a folder that cannot exist or take files: the
    folder or its nearest existing parent must be a directory this process may write in."""
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        problem = "is not a directory"
    elif not os.access(existing, os.W_OK | os.X_OK):
        problem = "is not writable"
    else:
        return
    raise InvalidInputError(
        f"{option} {value!r}: {str(existing)!r} {problem}; pass a path under a folder you may "
        "write in"
    )


def check_paths(options: ServeOptions) -> None:
    """The state directory and the audit log can be made: checked with the other options,
    before anything is created, instead of failing the server's startup with a traceback."""
    if options.protocol == "art":
        _creatable_directory(Path(options.art_base_path), "--base-path", options.art_base_path)
        return
    for name in options.base_model or ():
        base_model_folder(name)
    _creatable_directory(Path(options.state_dir), "--state-dir", options.state_dir)
    if options.audit_log is not None and options.audit_log != AUDIT_OFF:
        audit = Path(options.audit_log)
        if audit.is_dir():
            raise InvalidInputError(
                f"--audit-log {options.audit_log!r} is a directory; pass a file path or 'off'"
            )
        _creatable_directory(audit.parent, "--audit-log", options.audit_log)


def base_model_folder(name: str) -> str:
    """The folder of a `--base-model`: the folder itself, or a hub id's snapshot in the local
    cache (nothing is downloaded); InvalidInputError naming it when it is neither."""
    folder = Path(name)
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            raise InvalidInputError(
                f"--base-model {name!r} is a folder without config.json; pass a Hugging Face "
                "model folder (save_pretrained's)"
            )
        return str(folder)
    if re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", name) is not None:
        try:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(name, "config.json")
        except (ImportError, ValueError):
            found = None
        if isinstance(found, str):
            return str(Path(found).parent)
    raise InvalidInputError(
        f"--base-model {name!r} is neither a model folder nor a hub id in the local cache; "
        "download it first (huggingface-cli download <id>) or pass its folder"
    )


def audit_of(options: ServeOptions) -> AuditLog | None:
    if options.audit_log == AUDIT_OFF:
        return None
    path = Path(options.audit_log) if options.audit_log else Path(options.state_dir) / "audit.jsonl"
    return AuditLog(path, max_bytes=options.audit_max_bytes, backups=options.audit_backups)


def admin_keys_of(options: ServeOptions) -> KeyRing | None:
    if options.admin_keys is not None:
        return KeyRing.from_file(options.admin_keys)
    if os.environ.get(ADMIN_KEYS_ENV):
        return KeyRing.parse(os.environ[ADMIN_KEYS_ENV], f"${ADMIN_KEYS_ENV}")
    return None
