"""The Tinker server's client sessions: created, kept alive by heartbeats, finished.

Creating a training run or a sampling session needs a live session of the same tenant; a
finished one answers 410, an unknown one (or another tenant's) 404.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from typing import Any

from .errors import HttpError
from .wire import Reply


class Sessions:
    """The sessions of one server, by id: whose each is and whether it has finished."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._finished: dict[str, bool] = {}
        self._tenants: dict[str, str] = {}

    def create(self, body: dict[str, Any], tenant: str) -> Reply:
        session_id = str(uuid.uuid4())
        with self._lock:
            self._finished[session_id] = False
            self._tenants[session_id] = tenant
        return Reply.json({"type": "create_session", "session_id": session_id})

    def heartbeat(self, body: dict[str, Any], tenant: str) -> Reply:
        self.require(body, tenant)
        return Reply.json({"type": "session_heartbeat"})

    def finish(self, session_id: str, tenant: str) -> Reply:
        with self._lock:
            if self._tenants.get(session_id) != tenant:
                raise HttpError(404, f"unknown session {session_id!r}")
            self._finished[session_id] = True
        return Reply.json({})

    def is_live(self, session_id: str | None) -> bool:
        return session_id is not None and self._finished.get(session_id) is False

    def require(self, body: Mapping[str, Any], tenant: str) -> str:
        """The tenant's live session a request names, or a 404 or 410 saying why not."""
        session_id = str(body.get("session_id"))
        finished = self._finished.get(session_id)
        if finished is None or self._tenants.get(session_id) != tenant:
            raise HttpError(404, f"unknown session {session_id!r}; call create_session first")
        if finished:
            raise HttpError(410, f"session {session_id} has finished")
        return session_id
