"""Listening sockets for arthex's servers: `adapters.listen`, under the name the apps use."""

from __future__ import annotations

from ..adapters.listen import KEEP_ALIVE_S, listen

__all__ = ["KEEP_ALIVE_S", "listen"]
