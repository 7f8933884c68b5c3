"""The server's tenant quotas (quotas.py) on a Tinker server's runs.

- `--max-models-per-tenant`: the training runs a tenant has open at once (a run is open while
  the session that created it lives; a finished session's runs no longer count).
- `--max-checkpoint-bytes-per-tenant`: the bytes of the tenant's runs' folders under
  `--state-dir` (checkpoints, sampler weights, external weights). A save is admitted when the
  tenant has room for one more of the run's average checkpoint.

Both refusals are a 403 on the wire (app.py), not the training server's 429 and 507: the SDK
retries a 429 or a 5xx for minutes whatever the server says, and waiting frees no quota.
"""

from __future__ import annotations

from ..limits import ServerLimits
from ..quotas import TenantQuotas, disk_bytes
from .store import RunStore


class TinkerQuotas(TenantQuotas):
    """TenantQuotas whose storage is measured over each tenant's run folders."""

    def __init__(self, limits: ServerLimits, store: RunStore) -> None:
        super().__init__(limits, store.root / "runs")
        self.store = store

    def _runs_by_tenant(self) -> dict[str, list[str]]:
        owned: dict[str, list[str]] = {}
        for run_id in self.store.run_ids():
            record = self.store.run_record(run_id)
            if record is not None:
                owned.setdefault(str(record["tenant"]), []).append(run_id)
        return owned

    def tenant_bytes(self, tenant: str) -> int:
        runs = self._runs_by_tenant().get(tenant, [])
        return sum(disk_bytes(self.store.run_dir(run_id)) for run_id in runs)

    def bytes_by_tenant(self) -> dict[str, int]:
        return {
            tenant: sum(disk_bytes(self.store.run_dir(run_id)) for run_id in runs)
            for tenant, runs in self._runs_by_tenant().items()
        }

    def admit_save(self, tenant: str, run_id: str) -> None:
        """Room for one more checkpoint of the run (its average so far), or a 507."""
        if not self.limits.max_checkpoint_bytes_per_tenant:
            return
        folder = self.store.run_dir(run_id)
        kinds = [kind for kind in folder.iterdir() if kind.is_dir()] if folder.is_dir() else []
        saved = sum(1 for kind in kinds for _ in kind.iterdir())
        estimate = disk_bytes(folder) // saved if saved else 0
        self.check_storage(tenant, estimate)
