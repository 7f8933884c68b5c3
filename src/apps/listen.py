"""Listening sockets for arthex's servers: `adapters.listen`, under the name the apps use."""

from __future__ import annotations

from ..adapters.listen import listen

__all__ = ["listen"]
