"""The server's model registry: which tenant registered which `project/name`, under which id.

The backend knows a model only by its id (`RunRef(project=tenant, name=id)`), so two tenants
can use the same `project/name` without seeing each other, and no client-chosen string ever
becomes a path on the server. The registry is one JSON file, rewritten atomically on each
change, so a restarted server still knows every model whose checkpoints are on disk.

Ids are an HMAC of (tenant, project, name) under a secret of this server (`server-secret`
beside the registry, 32 random bytes made on first start, readable by its owner only): the
same on every call of this server, so a retried register lands on the same model, but not
computable elsewhere, so a tenant cannot confirm guesses of another tenant's names from an id
(a plain hash of the names, the same on every server, allowed exactly that). Lookups go by
the names held in the registry, never by recomputing an id, so ids made under an older rule
keep working.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from ...adapters.files import atomic_write_bytes, fsync_dir, full_disk_said, temp_path_for
from ...adapters.serverless.wire import MODEL_ID, now_iso
from ...core.errors import CorruptDataError
from ...core.identity import RunRef

REGISTRY_VERSION = 1
SECRET_FILE = "server-secret"
SECRET_BYTES = 32


def model_id(secret: bytes, tenant: str, project: str, name: str) -> str:
    """Deterministic for one server (a register retried after a crash lands on the same
    checkpoints), unguessable without the server's secret."""
    message = f"{tenant}\0{project}\0{name}".encode()
    return "m" + hmac.new(secret, message, hashlib.sha256).hexdigest()[:24]


def load_or_create_secret(path: Path) -> bytes:
    """The server's id secret: read it, or make it once (created 0600 under a temp name and
    renamed into place, so it is never readable by others and never half-written; when two
    processes race, the first rename wins and both read that one)."""
    try:
        return _read_secret(path)
    except FileNotFoundError:
        pass
    temp = temp_path_for(path)
    text = secrets.token_hex(SECRET_BYTES).encode()
    try:
        with full_disk_said(path, len(text)):
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                if os.write(fd, text) != len(text):
                    raise OSError(errno.ENOSPC, "short write", str(temp))
                os.fsync(fd)
            finally:
                os.close(fd)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    try:
        os.link(temp, path)  # fails if another process made it first
    except FileExistsError:
        pass
    finally:
        temp.unlink()
    fsync_dir(path.parent)
    return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    text = path.read_text().strip()
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        secret = b""
    if len(secret) < 16:
        raise CorruptDataError(
            f"the server secret {path} is damaged; restore it from a backup (model ids depend "
            "on it), or move it away to make a new one (registered models keep their ids)"
        )
    return secret


@attrs.frozen
class ModelRecord:
    id: str
    tenant: str
    project: str
    name: str
    base_model: str | None
    config: Mapping[str, Any] = attrs.field(factory=dict)
    created_at: str = attrs.field(factory=now_iso)

    @property
    def label(self) -> str:
        """How the tenant names it: `project/name`."""
        return f"{self.project}/{self.name}"

    @property
    def run(self) -> RunRef:
        """The identity the backend sees."""
        return RunRef(project=self.tenant, name=self.id)

    def public(self) -> dict[str, Any]:
        """What the tenant is told; the tenant is implied by the key."""
        return {
            "id": self.id,
            "object": "model",
            "entity": self.tenant,
            "project": self.project,
            "name": self.name,
            "base_model": self.base_model,
            "config": dict(self.config),
            "created_at": self.created_at,
            "run_id": self.id,
        }

    def to_json(self) -> dict[str, Any]:
        kept = {k: v for k, v in self.public().items() if k not in ("entity", "run_id")}
        return {**kept, "tenant": self.tenant}


class ModelRegistry:
    """In memory, persisted to `path` on every change. Lookups are by tenant: another
    tenant's model is simply not found."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._models: dict[str, ModelRecord] = {}
        self._secret: bytes | None = None

    def new_id(self, tenant: str, project: str, name: str) -> str:
        """The id a new model gets (the same for the same names on this server)."""
        if self._secret is None:
            self._secret = load_or_create_secret(self.path.parent / SECRET_FILE)
        return model_id(self._secret, tenant, project, name)

    def load(self) -> None:
        self._secret = load_or_create_secret(self.path.parent / SECRET_FILE)
        if not self.path.exists():
            return
        try:
            payload = json.loads(self.path.read_bytes())
            if payload.get("version") != REGISTRY_VERSION:
                raise ValueError(f"unknown version {payload.get('version')!r}")
            models = {
                item["id"]: ModelRecord(
                    id=item["id"],
                    tenant=item["tenant"],
                    project=item["project"],
                    name=item["name"],
                    base_model=item.get("base_model"),
                    config=item.get("config") or {},
                    created_at=item.get("created_at") or now_iso(),
                )
                for item in payload["models"]
            }
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptDataError(
                f"the model registry {self.path} cannot be read ({exc}); restore it from a "
                "backup or move it away to start with no registered models"
            ) from exc
        for record in models.values():
            if MODEL_ID.fullmatch(record.id) is None:
                raise CorruptDataError(
                    f"the model registry {self.path} holds a bad id {record.id!r}"
                )
        self._models = models

    def get(self, tenant: str, model_id: str) -> ModelRecord | None:
        record = self._models.get(model_id)
        return record if record is not None and record.tenant == tenant else None

    def find(self, tenant: str, project: str, name: str) -> ModelRecord | None:
        for record in self._models.values():
            if (record.tenant, record.project, record.name) == (tenant, project, name):
                return record
        return None

    def named(self, tenant: str, name: str, project: str | None = None) -> list[ModelRecord]:
        return [
            record
            for record in self._models.values()
            if record.tenant == tenant
            and record.name == name
            and (project is None or record.project == project)
        ]

    def of_tenant(self, tenant: str) -> list[ModelRecord]:
        return sorted(
            (r for r in self._models.values() if r.tenant == tenant),
            key=lambda r: (r.project, r.name),
        )

    def add(self, record: ModelRecord) -> None:
        self._save({**self._models, record.id: record})

    def remove(self, model_id: str) -> None:
        self._save({k: v for k, v in self._models.items() if k != model_id})

    def _save(self, models: dict[str, ModelRecord]) -> None:
        payload = {
            "version": REGISTRY_VERSION,
            "models": [r.to_json() for r in sorted(models.values(), key=lambda r: r.id)],
        }
        atomic_write_bytes(self.path, json.dumps(payload, indent=1).encode())
        self._models = models
