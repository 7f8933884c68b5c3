"""The training server's audit log: one JSON line per request, rotated by size.

Each line says when, who (the tenant, or `admin:<label>` for the metrics route, or null when
the key was missing or wrong), what (method and route template, never the raw path, which a
client chooses), the status, which model and job it touched when known, and how long it
took. It never holds a key, a header or a body: the log is for finding out who did what, and
must be safe to hand to whoever investigates.

The file is created 0600 (tenant names and ids are the operator's business) and rotated
when it would pass `max_bytes`: `audit.jsonl` becomes `audit.jsonl.1`, and so on up to
`backups` files, the oldest dropped. Writes are line-buffered appends from the event loop;
a line is small, so they cost little, and a failure to write is reported on the server's
log rather than failing the request.
"""

from __future__ import annotations

import io
import json
import logging
import logging.handlers
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_AUDIT_BACKUPS", "DEFAULT_AUDIT_MAX_BYTES", "AuditLog"]

DEFAULT_AUDIT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_AUDIT_BACKUPS = 5


class _PrivateRotatingHandler(logging.handlers.RotatingFileHandler):
    """A RotatingFileHandler whose files are created readable by their owner only."""

    def _open(self) -> io.TextIOWrapper:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        return open(fd, "a", encoding="utf-8")


class AuditLog:
    def __init__(
        self,
        path: str | Path,
        *,
        max_bytes: int = DEFAULT_AUDIT_MAX_BYTES,
        backups: int = DEFAULT_AUDIT_BACKUPS,
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self._logger: logging.Logger | None = None

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handler = _PrivateRotatingHandler(
            self.path, maxBytes=self.max_bytes, backupCount=self.backups, encoding="utf-8"
        )
        handler.setFormatter(logging.Formatter("%(message)s"))
        # A logger of its own (unique name, no propagation): audit lines never reach the
        # server's log, and two servers in one process keep two files.
        logger = logging.getLogger(f"arthex.audit.{secrets.token_hex(6)}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)
        self._logger = logger

    def close(self) -> None:
        logger, self._logger = self._logger, None
        if logger is not None:
            for handler in list(logger.handlers):
                handler.close()
                logger.removeHandler(handler)

    def record(
        self,
        *,
        tenant: str | None,
        method: str,
        route: str | None,
        status: int,
        duration_ms: float,
        model_id: str | None = None,
        job_id: str | None = None,
    ) -> None:
        if self._logger is None:
            return
        entry: dict[str, Any] = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "tenant": tenant,
            "method": method,
            "route": route,
            "status": status,
            "model_id": model_id,
            "job_id": job_id,
            "duration_ms": round(duration_ms, 1),
        }
        self._logger.info(json.dumps(entry, separators=(",", ":")))
