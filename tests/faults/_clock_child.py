"""Run by test_clock_jumps in a fresh interpreter: the clocks are replaced before arthex is
imported, so every reader of `time.time` and `time.monotonic` (default arguments included)
reads these. `elapsed` is real time passing (both clocks move), `jump` the wall clock alone
set forward or back. Prints one JSON object: what each decision came out as.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

_REAL_WALL = time.time()
_elapsed = 0.0
_jump = 0.0


def _wall() -> float:
    return _REAL_WALL + _elapsed + _jump


def _monotonic() -> float:
    return 1000.0 + _elapsed


time.time = _wall
time.monotonic = _monotonic


def at(elapsed: float, jump: float) -> None:
    global _elapsed, _jump
    _elapsed, _jump = elapsed, jump


def lease_alive(jump: float, elapsed: float, root: Path) -> bool:
    """A server lease of 30 s claimed, then `elapsed` seconds and a wall jump of `jump`."""
    from arthex.apps.server.leases import LeaseTable

    at(0.0, 0.0)
    table = LeaseTable(root / f"leases{jump}-{elapsed}.json", ttl_s=30)
    table.claim("m1", "a" * 16, "pid 1 on box", "m1")
    at(elapsed, jump)
    return table.live("m1") is not None


def job_kept(jump: float, elapsed: float, root: Path) -> bool:
    """A finished job whose end was read, then `elapsed` seconds and a wall jump of `jump`:
    is it still kept (retention one hour)?"""
    from arthex.adapters.serverless.wire import TRAINING_FAILED
    from arthex.apps.server.jobs import JobStore

    at(0.0, 0.0)
    store = JobStore(root / f"jobs{jump}-{elapsed}", retention_s=3600.0)
    store.load()
    job = store.create("t", "m1")
    job.append(TRAINING_FAILED, {"message": "x", "type": "X"})
    job.mark_read()
    at(elapsed, jump)
    store.prune()
    return store.get("t", job.id) is not None


def rate_limited(jump: float) -> bool:
    """A key that spent its burst, then the wall clock jumps: still limited?"""
    from arthex.apps.server.ratelimit import TokenBuckets

    at(0.0, 0.0)
    buckets = TokenBuckets(rate=1.0, burst=2)
    buckets.take(b"k")
    buckets.take(b"k")
    at(0.0, jump)
    return buckets.take(b"k") > 0


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="clock-"))
    hour = 3600.0
    result = {
        "lease_forward": lease_alive(hour, 1.0, root),
        "lease_back": lease_alive(-hour, 31.0, root),
        "job_forward": job_kept(2 * hour, 10.0, root),
        "job_back": job_kept(-2 * hour, hour + 1.0, root),
        "rate_forward": rate_limited(hour),
        "rate_back": rate_limited(-hour),
    }
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
