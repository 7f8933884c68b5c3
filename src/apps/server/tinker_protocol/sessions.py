"""The tinker emulator's client sessions: created, kept alive by heartbeats, finished.

Creating a training run or a sampling session needs a live session; a finished one answers
410, an unknown one 404.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from typing import Any

from .errors import HttpError
from .wire import Reply


class Sessions:
    """The sessions of one emulator, by id, and whether each has finished."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._finished: dict[str, bool] = {}

    def create(self, body: dict[str, Any]) -> Reply:
        session_id = str(uuid.uuid4())
        with self._lock:
            self._finished[session_id] = False
        return Reply.json({"type": "create_session", "session_id": session_id})

    def heartbeat(self, body: dict[str, Any]) -> Reply:
        self.require(body)
        return Reply.json({"type": "session_heartbeat"})

    def finish(self, session_id: str) -> Reply:
        with self._lock:
            if session_id not in self._finished:
                raise HttpError(404, f"unknown session {session_id!r}")
            self._finished[session_id] = True
        return Reply.json({})

    def require(self, body: Mapping[str, Any]) -> str:
        """The live session a request names, or a 404 or 410 saying why not."""
        session_id = str(body.get("session_id"))
        finished = self._finished.get(session_id)
        if finished is None:
            raise HttpError(404, f"unknown session {session_id!r}; call create_session first")
        if finished:
            raise HttpError(410, f"session {session_id} has finished")
        return session_id
