"""One trainer per model on the training server: a lease, held by one client at a time.

The client makes the lease id (random, one per ServerlessBackend) and sends it with its
register, as `{"lease": {"id", "holder"}}`; `holder` is what another client is told about
it ("pid 4242 on gpu-box-1"). The server grants the lease when the model has none or the
one it has expired, renews it when the same id asks again, and refuses any other id with
409 `run_busy` (the client raises RunBusyError naming the holder). Because the id is the
client's, a register retried after a timeout renews instead of being refused by itself.

Afterwards the client sends the id in the `X-Arthex-Lease` header on every request. Training
calls (a job, a checkpoint deletion) need the lease: with the holder's id they renew it; with
no id or another id they are refused while a live lease is held by someone else, and take
the lease when it is free. Reads renew a lease their id holds and never need one. A client
also renews with `PUT /preview/models/{id}/lease` (its heartbeat, every third of the TTL
while it waits on rollouts) and gives the lease back with `DELETE` on the same path at
close. A client that vanished stops renewing, and its lease expires `ttl_s` after its last
request; the next trainer then takes it.

Leases are the same tenant's business only (a model belongs to one tenant, so the holder is
never shown across tenants). Grants and releases are written to `leases.json` (atomically);
renewals stay in memory. After a restart every lease on file gets a fresh TTL, so its holder
has time to renew before anyone else may take it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

from ...adapters.files import atomic_write_bytes
from ...core.errors import CorruptDataError, InvalidInputError, RunBusyError

__all__ = ["LEASE_HEADER", "Lease", "LeaseTable"]

LEASE_HEADER = "x-arthex-lease"
# Sent with the lease header on register, it asks for the lease (as a body's "lease" does),
# so a register's JSON is the hosted API's own.
HOLDER_HEADER = "x-arthex-lease-holder"
LEASE_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")
MAX_HOLDER_LENGTH = 200


@attrs.frozen
class Lease:
    id: str
    holder: str
    since: str
    expires_at: float  # on the table's monotonic clock: never written (a restart renews)


def parse_claim(payload: object) -> tuple[str, str] | None:
    """`{"id", "holder"}` from a register or heartbeat body, checked; None when absent."""
    if payload is None:
        return None
    if not isinstance(payload, dict):
        raise InvalidInputError('\'lease\' must be an object {"id": ..., "holder": ...}')
    lease_id, holder = payload.get("id"), payload.get("holder", "")
    if not isinstance(lease_id, str) or LEASE_ID.fullmatch(lease_id) is None:
        raise InvalidInputError(
            "lease id must be 16 to 64 characters from A-Z, a-z, 0-9, '_' and '-'"
        )
    if (
        not isinstance(holder, str)
        or len(holder) > MAX_HOLDER_LENGTH
        or any(not c.isprintable() for c in holder)
    ):
        raise InvalidInputError(
            f"lease holder must be printable text of at most {MAX_HOLDER_LENGTH} characters"
        )
    return lease_id, holder or "an unnamed client"


class LeaseTable:
    def __init__(
        self,
        path: Path,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.ttl_s = ttl_s
        # Expiry runs on a monotonic clock: a wall clock set an hour ahead must not end every
        # live lease (a second trainer would take a run mid-update), nor one set back keep a
        # vanished client's lease an hour longer. The wall clock only stamps `since`.
        self.clock = clock
        self.wall = wall
        self._leases: dict[str, Lease] = {}  # model id -> lease

    def load(self) -> None:
        if not self.path.exists():
            return
        try:
            items = json.loads(self.path.read_bytes())["leases"]
            fresh = self.clock() + self.ttl_s
            self._leases = {
                str(item["model_id"]): Lease(
                    id=str(item["id"]),
                    holder=str(item["holder"]),
                    since=str(item["since"]),
                    expires_at=fresh,
                )
                for item in items
            }
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CorruptDataError(
                f"the lease file {self.path} cannot be read ({exc}); move it away to start "
                "with no leases (each trainer takes its model's again on its next call)"
            ) from exc

    def live(self, model_id: str) -> Lease | None:
        lease = self._leases.get(model_id)
        return lease if lease is not None and lease.expires_at > self.clock() else None

    def claim(self, model_id: str, lease_id: str, holder: str, model: str) -> Lease:
        """Grant or renew the lease for `lease_id`; RunBusyError when another holds it."""
        current = self.live(model_id)
        if current is not None and current.id != lease_id:
            raise self._busy(current, model)
        now = self.clock()
        lease = Lease(
            id=lease_id,
            holder=holder if current is None else current.holder,
            since=_iso(self.wall()) if current is None else current.since,
            expires_at=now + self.ttl_s,
        )
        self._leases[model_id] = lease
        if current is None:
            self._save()
        return lease

    def require(self, model_id: str, lease_id: str | None, model: str) -> None:
        """A training call: allowed for the holder (renewed), or anyone when the lease is
        free (taken, if the caller sent an id); RunBusyError otherwise."""
        current = self.live(model_id)
        if current is not None and current.id != lease_id:
            raise self._busy(current, model)
        if lease_id is not None:
            self.claim(model_id, lease_id, current.holder if current else "a training call", model)

    def renew(self, model_id: str, lease_id: str | None) -> None:
        """A read by the holder keeps its lease alive; anyone else's read changes nothing."""
        current = self.live(model_id)
        if current is not None and current.id == lease_id:
            self._leases[model_id] = attrs.evolve(current, expires_at=self.clock() + self.ttl_s)

    def release(self, model_id: str, lease_id: str | None) -> bool:
        current = self._leases.get(model_id)
        if current is None or current.id != lease_id:
            return False
        del self._leases[model_id]
        self._save()
        return True

    def _busy(self, lease: Lease, model: str) -> RunBusyError:
        left = max(0.0, lease.expires_at - self.clock())
        return RunBusyError(
            f"model {model} has a trainer already: {lease.holder}, since {lease.since}; "
            f"one trainer per model at a time. Stop that trainer (its lease ends at its "
            f"close, or {self.ttl_s:g} s after its last call: {left:.0f} s from now), then "
            "register again"
        )

    def _save(self) -> None:
        items: list[dict[str, Any]] = [
            {"model_id": model_id, "id": lease.id, "holder": lease.holder, "since": lease.since}
            for model_id, lease in sorted(self._leases.items())
        ]
        atomic_write_bytes(self.path, json.dumps({"leases": items}).encode())


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")
