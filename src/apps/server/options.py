"""`arthex serve`'s command line: the options, their checks, and what they build.

Every option is checked before anything starts or is created; a bad one ends the command
with one line naming the option and what it takes (exit status 2), never a traceback and
never a server that starts and then refuses every request. The limits come from
ServerLimits, whose bounds are the ones checked here.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from ...core.errors import InvalidInputError
from .audit import DEFAULT_AUDIT_BACKUPS, DEFAULT_AUDIT_MAX_BYTES, AuditLog
from .keys import KeyRing
from .limits import BOUNDS, ServerLimits

__all__ = ["ADMIN_KEYS_ENV", "DEFAULT_PORT", "LOG_LEVELS", "audit_of", "limits_of", "parser"]

DEFAULT_PORT = 8000
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
}


class _Parser(argparse.ArgumentParser):
    """Option errors are one line (what was wrong, where to look), not usage and a traceback."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def _integer(text: str) -> int:
    if re.fullmatch(r"-?[0-9]{1,19}", text) is None:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(text)


def _number(text: str) -> float:
    if re.fullmatch(r"-?[0-9]{1,19}(\.[0-9]{1,9})?", text) is None:
        raise argparse.ArgumentTypeError(f"expected a number such as 2 or 0.5, got {text!r}")
    return float(text)


def _port(text: str) -> int:
    port = _integer(text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is from 0 to 65535, got {port}")
    return port


def parser() -> argparse.ArgumentParser:
    defaults = ServerLimits()
    p = _Parser(prog="arthex serve", description="Serve a training backend over HTTP.")
    p.add_argument("--backend", default="local", help="local, inmemory, or module:callable")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default loopback)")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT, help="0 picks a free port")
    p.add_argument("--keys", default=None, help="API keys file (default: $ARTHEX_SERVER_KEYS)")
    p.add_argument("--state-dir", default=".arthex-server", help="registry, jobs, checkpoints")
    p.add_argument(
        "--allow-base-model",
        action="append",
        default=None,
        help="a base model tenants may register (repeatable; default: any)",
    )
    p.add_argument(
        "--log-level", type=str.lower, choices=LOG_LEVELS, default="warning", metavar="LEVEL"
    )
    ops = p.add_argument_group("operations")
    ops.add_argument(
        "--admin-keys",
        default=None,
        help=f"keys file for GET /metrics (default: ${ADMIN_KEYS_ENV}; none: /metrics closed)",
    )
    ops.add_argument(
        "--audit-log",
        default=None,
        metavar="PATH",
        help=f"JSON-lines audit log (default: <state-dir>/audit.jsonl; '{AUDIT_OFF}' disables)",
    )
    ops.add_argument(
        "--audit-max-bytes",
        type=_integer,
        default=DEFAULT_AUDIT_MAX_BYTES,
        help="rotate the audit log at this size (default %(default)s)",
    )
    ops.add_argument(
        "--audit-backups",
        type=_integer,
        default=DEFAULT_AUDIT_BACKUPS,
        help="rotated audit files kept (default %(default)s)",
    )
    limits = p.add_argument_group("limits")
    for field, (_, _, option) in BOUNDS.items():
        default = getattr(defaults, field)
        limits.add_argument(
            option,
            dest=field,
            type=_integer if isinstance(default, int) else _number,
            default=default,
            help=f"{LIMIT_HELP[field]} (default {default})",
        )
    return p


def limits_of(args: argparse.Namespace) -> ServerLimits:
    """The limits the options name; InvalidInputError names an option out of its bounds."""
    return ServerLimits(**{field: getattr(args, field) for field in BOUNDS})


def audit_of(args: argparse.Namespace) -> AuditLog | None:
    if not 4096 <= args.audit_max_bytes <= 2**40:
        raise InvalidInputError(
            f"--audit-max-bytes must be from 4096 to {2**40}, got {args.audit_max_bytes}"
        )
    if not 0 <= args.audit_backups <= 1000:
        raise InvalidInputError(f"--audit-backups must be from 0 to 1000, got {args.audit_backups}")
    if args.audit_log == AUDIT_OFF:
        return None
    path = Path(args.audit_log) if args.audit_log else Path(args.state_dir) / "audit.jsonl"
    return AuditLog(path, max_bytes=args.audit_max_bytes, backups=args.audit_backups)


def admin_keys_of(args: argparse.Namespace) -> KeyRing | None:
    if args.admin_keys is not None:
        return KeyRing.from_file(args.admin_keys)
    if os.environ.get(ADMIN_KEYS_ENV):
        return KeyRing.parse(os.environ[ADMIN_KEYS_ENV], f"${ADMIN_KEYS_ENV}")
    return None


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse and check every option; exits with one line on the first bad one."""
    p = parser()
    args = p.parse_args(argv)
    try:
        args.limits = limits_of(args)
        args.audit = audit_of(args)
    except InvalidInputError as exc:
        p.error(str(exc))
    return args
