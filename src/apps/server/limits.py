"""The training server's limits, in one value: what one request, one key and one tenant may use.

Every limit has a default that suits a small shared server and a documented bound; a value
out of its bound is refused when the server starts (one line naming the option), never
discovered later as a server that refuses every request. `0` means "no limit" only where
the field says so.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from ...core.errors import InvalidInputError
from ..listen import KEEP_ALIVE_S
from .jobs import DEFAULT_RETENTION_S

__all__ = ["BOUNDS", "ServerLimits"]

KIB = 1024
MIB = 1024 * KIB

# field -> (lowest, highest, what the CLI option is called); `0` is allowed where noted.
BOUNDS: dict[str, tuple[float, float, str]] = {
    "max_body_bytes": (1 * KIB, 4096 * MIB, "--max-body-bytes"),
    "spool_threshold_bytes": (0, 4096 * MIB, "--spool-threshold-bytes"),
    "max_header_bytes": (1 * KIB, 16 * MIB, "--max-header-bytes"),
    "max_headers": (8, 10_000, "--max-headers"),
    "rate_per_s": (0, 1_000_000, "--rate-limit"),
    "rate_burst": (1, 1_000_000, "--rate-burst"),
    "max_jobs_per_tenant": (0, 1_000_000, "--max-jobs-per-tenant"),
    "max_models_per_tenant": (0, 1_000_000, "--max-models-per-tenant"),
    "max_checkpoint_bytes_per_tenant": (0, 2**62, "--max-checkpoint-bytes-per-tenant"),
    "max_running_jobs": (0, 1_000_000, "--max-running-jobs"),
    "lease_ttl_s": (1, 86_400, "--lease-ttl"),
    "job_retention_s": (0, 365 * 86_400, "--job-retention"),
    "keep_alive_s": (1, 3_600, "--keep-alive"),
}


def _check(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    low, high, option = BOUNDS[attribute.name]
    whole = attribute.type in (int, "int")
    kinds = int if whole else int | float
    number_ok = isinstance(value, kinds) and not isinstance(value, bool)
    if not number_ok or not math.isfinite(value) or not low <= value <= high:
        what = "a whole number" if whole else "a number"
        raise InvalidInputError(
            f"{option} must be {what} from {_show(low)} to {_show(high)}, got {value!r}"
        )


def _show(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


@attrs.frozen
class ServerLimits:
    """What the server lets a request, a key and a tenant use.

    - `max_body_bytes`: a request body above it is refused with 413 while it streams in.
    - `spool_threshold_bytes`: a body above it waits in a temp file under the state
      directory, not in memory, until its route parses it; the route then reads it into one
      buffer, so a request holds its body once (about 1x the body, not 2-4x).
    - `max_header_bytes`, `max_headers`: the request line and headers together, and their
      count; above either, 431 before authentication, without buffering the excess.
    - `rate_per_s`, `rate_burst`: each API key's token bucket (`rate_per_s` 0 = no rate
      limit); an empty bucket answers 429 with Retry-After. Rollouts sampled through the
      proxy count, so the default leaves room for a few dozen concurrent rollout workers.
    - `max_jobs_per_tenant`: one tenant's training jobs at once, queued ones included
      (0 = no limit); 429 above it.
    - `max_models_per_tenant`: models one tenant may register (0 = no limit); 429 above it.
    - `max_checkpoint_bytes_per_tenant`: bytes one tenant's models may keep on the server's
      disk (0 = no limit); a register or a job that would pass it is refused with 507.
    - `max_running_jobs`: jobs training at once on the whole server; more wait in a queue
      (0 = no limit). One GPU usually wants 1.
    - `lease_ttl_s`: how long a trainer's lease on a model outlives the trainer's last call
      (see leases.py); the client renews it every third of this.
    - `job_retention_s`: how long a finished job's events are kept after their end was read.
    - `keep_alive_s`: how long an idle kept-alive connection stays open; by default
      listen.KEEP_ALIVE_S, longer than clients keep theirs.
    """

    max_body_bytes: int = attrs.field(default=64 * MIB, validator=_check)
    spool_threshold_bytes: int = attrs.field(default=1 * MIB, validator=_check)
    max_header_bytes: int = attrs.field(default=64 * KIB, validator=_check)
    max_headers: int = attrs.field(default=100, validator=_check)
    rate_per_s: float = attrs.field(default=100.0, validator=_check)
    rate_burst: int = attrs.field(default=200, validator=_check)
    max_jobs_per_tenant: int = attrs.field(default=4, validator=_check)
    max_models_per_tenant: int = attrs.field(default=100, validator=_check)
    max_checkpoint_bytes_per_tenant: int = attrs.field(default=0, validator=_check)
    max_running_jobs: int = attrs.field(default=0, validator=_check)
    lease_ttl_s: float = attrs.field(default=60.0, validator=_check)
    job_retention_s: float = attrs.field(default=DEFAULT_RETENTION_S, validator=_check)
    keep_alive_s: int = attrs.field(default=KEEP_ALIVE_S, validator=_check)
