"""Per-tenant quotas of the training server: models, jobs at once, checkpoint bytes on disk.

Every check runs before anything is written, so a refused request leaves the state as it
was. Models and jobs are counted in memory (a model being registered holds its place while
the backend loads it, so two concurrent registers cannot both take the last one); checkpoint
bytes are measured on disk under the tenant's folder of the backend's state (`backend/
<tenant>/`), where a file-based backend keeps them, so what is counted is what is there.

Storage is checked on admission: a new model needs the tenant under its quota, and a job
needs room for one more checkpoint, estimated as the model's bytes on disk divided by its
checkpoints (the average checkpoint). A job admitted runs to its end even if its checkpoint
turns out larger than the estimate; the next one is refused until the tenant deletes some.
Models count 429 (`insufficient_quota`), storage 507 (`insufficient_storage`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from ...adapters.serverless.errors import QuotaExceededError
from .limits import ServerLimits

__all__ = ["TenantQuotas", "disk_bytes"]


def disk_bytes(root: Path) -> int:
    """Bytes of the regular files under `root` (links are not followed; 0 if it is gone)."""
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                info = os.lstat(os.path.join(directory, name))
                if stat.S_ISREG(info.st_mode):
                    total += info.st_size
    return total


class TenantQuotas:
    def __init__(self, limits: ServerLimits, backend_root: Path) -> None:
        self.limits = limits
        self.backend_root = backend_root
        self._jobs: Counter[str] = Counter()
        self._pending: dict[str, set[tuple[str, str]]] = {}

    # --- models ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def registering(self, tenant: str, names: tuple[str, str], registered: int) -> Iterator[None]:
        """Hold a model's place while it is registered; QuotaExceededError when the tenant
        has `max_models_per_tenant` models (registered or being registered). Storage is the
        caller's to check (`check_storage`, off the event loop)."""
        pending = self._pending.setdefault(tenant, set())
        limit = self.limits.max_models_per_tenant
        if limit and names not in pending and registered + len(pending) >= limit:
            raise QuotaExceededError(
                f"this API key's tenant has {registered} models, the most this server allows "
                f"({limit}); register under an existing name or ask the operator for more"
            )
        first = names not in pending
        pending.add(names)
        try:
            yield
        finally:
            if first:
                pending.discard(names)

    # --- jobs -----------------------------------------------------------------------------

    def admit_job(self, tenant: str) -> None:
        limit = self.limits.max_jobs_per_tenant
        if limit and self._jobs[tenant] >= limit:
            raise QuotaExceededError(
                f"this API key's tenant has {self._jobs[tenant]} training jobs running or "
                f"queued, the most this server allows at once ({limit}); wait for one to end"
            )

    def job_started(self, tenant: str) -> None:
        self._jobs[tenant] += 1

    def job_ended(self, tenant: str) -> None:
        self._jobs[tenant] -= 1
        if self._jobs[tenant] <= 0:
            del self._jobs[tenant]

    # --- storage --------------------------------------------------------------------------

    def tenant_bytes(self, tenant: str) -> int:
        return disk_bytes(self.backend_root / tenant)

    def bytes_by_tenant(self) -> dict[str, int]:
        if not self.backend_root.is_dir():
            return {}
        return {
            entry.name: disk_bytes(Path(entry.path))
            for entry in os.scandir(self.backend_root)
            if entry.is_dir(follow_symlinks=False)
        }

    def check_storage(self, tenant: str, more: int) -> None:
        """QuotaExceededError (507) when the tenant's bytes plus `more` pass the quota."""
        limit = self.limits.max_checkpoint_bytes_per_tenant
        if not limit:
            return
        used = self.tenant_bytes(tenant)
        if used + more > limit or used >= limit:
            needed = f" and the next checkpoint needs about {more} more" if more else ""
            raise QuotaExceededError(
                f"this API key's tenant keeps {used} bytes of checkpoints on this server{needed}; "
                f"the quota is {limit} bytes: delete checkpoints (model.delete_checkpoints()) "
                "or ask the operator for more",
                status=507,
            )

    async def admit_checkpoint(self, tenant: str, model_dir: Path, checkpoints: int) -> None:
        """Room for one more checkpoint of the model in `model_dir` (its average size)."""
        if not self.limits.max_checkpoint_bytes_per_tenant:
            return

        def check() -> None:
            estimate = disk_bytes(model_dir) // max(1, checkpoints)
            self.check_storage(tenant, estimate)

        await asyncio.to_thread(check)
