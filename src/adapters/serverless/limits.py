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
    "job_retention_s": (0, 365 * 86_400, "--job-retention"),
}


def _check(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    low, high, option = BOUNDS[attribute.name]
    number_ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not number_ok or not math.isfinite(value) or not low <= value <= high:
        raise InvalidInputError(
            f"{option} must be a number from {_show(low)} to {_show(high)}, got {value!r}"
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
    - `job_retention_s`: how long a finished job's events are kept after their end was read.
    """

    max_body_bytes: int = attrs.field(default=64 * MIB, validator=_check)
    spool_threshold_bytes: int = attrs.field(default=1 * MIB, validator=_check)
    max_header_bytes: int = attrs.field(default=64 * KIB, validator=_check)
    max_headers: int = attrs.field(default=100, validator=_check)
    job_retention_s: float = attrs.field(default=DEFAULT_RETENTION_S, validator=_check)
